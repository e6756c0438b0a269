from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity

# Device context managers, and the call that does what a statement of them was meant to do.
_SETTERS = {"torch.accelerator.device_index": "set_device_index", "torch.cuda.device": "set_device"}


class DeviceContextAsStatement(Rule):
    """
    ## What it does
    Finds `torch.accelerator.device_index(i)` or `torch.cuda.device(i)` written alone on a line, as
    if it set the current device.

    ## Why is this bad?
    Both are context managers: they switch the device only inside a `with` block. Called as a
    statement they build an object and drop it; the current device stays GPU 0. (Where the setter
    was called with the same device just before, on every path, the line is only redundant: not
    reported.) Every rank then
    works on GPU 0, and NCCL refuses the process group (`Duplicate GPU detected : rank 1 and rank 0
    both on CUDA device`) or the ranks share one GPU's memory.

    ## Example
    ```python
    torch.accelerator.device_index(local_rank)
    ```

    ## Use instead
    ```python
    torch.accelerator.set_device_index(local_rank)
    ```

    ## Fix safety
    The fix is safe: `torch.accelerator.set_device_index(i)` (or `torch.cuda.set_device(i)`) does what
    the statement was written to do, and the statement did nothing.

    ## References
    - [torch.accelerator.set_device_index](https://pytorch.org/docs/stable/generated/torch.accelerator.set_device_index.html)
    - [torch.accelerator.device_index](https://pytorch.org/docs/stable/generated/torch.accelerator.device_index.html)
    """

    code = "FSDP305"
    name = "device-context-as-statement"
    summary = "Device context manager called as a statement: it sets no device"
    severity = Severity.ERROR
    fix_availability = FixAvailability.SAFE
    trigger_tokens = ("device_index(", "cuda.device(")

    def check(self, program) -> Iterable[Finding]:
        import libcst as cst

        from fsdplint.fixes import AddImport, Fix, Replace
        from fsdplint.model import CALL
        from fsdplint.rulekit import calls, code, is_simple_statement, via

        for flow in program.flows:
            for event in flow.of_kind(CALL):
                setter = _SETTERS.get(event.qname or "")
                statement = event.statement
                if setter is None or not (is_simple_statement(statement) and isinstance(statement.body[0], cst.Expr)
                                          and statement.body[0].value is event.node):
                    continue
                module = event.qname.rsplit(".", 1)[0]
                if _already_set(flow, event, f"{module}.{setter}"):
                    continue
                func = event.node.func
                if isinstance(func, cst.Attribute):
                    operations = [Replace(func, lambda node, setter=setter: node.with_changes(attr=cst.Name(setter)))]
                else:  # imported by name: `from torch.accelerator import device_index`
                    operations = [Replace(func, lambda _, setter=setter: cst.Name(setter)), AddImport(module, (setter,))]
                setter_call = f"{module}.{setter}"
                yield Finding(event.file, event.node,
                              f"`{code(event, event.node)}` is a context manager: alone on a line it sets no device{via(event)}; "
                              f"call `{setter_call}(...)`",
                              Fix(f"Call `{setter_call}`", safe=True, operations=operations), related=calls(flow, event))


def _already_set(flow, event, setter: str) -> bool:
    """The last call of `setter` before the statement, on every path to it, was given the same device
    (the same variable, or the same literal): the device is set already (physicsnemo's
    `torch.cuda.set_device(device)` then `torch.cuda.device(device)`)."""
    from fsdplint.model import CALL

    earlier = [other for other in flow.of_kind(CALL) if other.index < event.index and other.qname == setter and not other.exclusive(event)]
    if not earlier or not earlier[-1].on_every_path_to(event) or not earlier[-1].args or not event.args:
        return False
    set_to, meant = earlier[-1].args[0], event.args[0]
    return set_to.ref is not None and set_to.ref == meant.ref or set_to.constant is not None and set_to.constant == meant.constant
