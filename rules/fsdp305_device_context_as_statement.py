from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity

# Device context managers, and the call that does what a statement of them was meant to do.
_SETTERS = {"torch.accelerator.device_index": "set_device_index", "torch.cuda.device": "set_device"}
# The setters themselves, by qualified name: either one sets the device the other would.
# Calls that initialize CUDA in the process, past which `init_device_mesh` leaves the device as it is.
_INITIALIZES_CUDA = frozenset({"torch.accelerator.current_device_index", "torch.cuda.current_device", "torch.cuda.init",
                               "torch.cuda.current_stream", "torch.cuda.synchronize"})
_SETTER_CALLS = frozenset(f"{manager.rsplit('.', 1)[0]}.{setter}" for manager, setter in _SETTERS.items())


class DeviceContextAsStatement(Rule):
    """
    ## What it does
    Finds `torch.accelerator.device_index(i)` or `torch.cuda.device(i)` written alone on a line, as
    if it set the current device.

    ## Why is this bad?
    Both are context managers: they switch the device only inside a `with` block. Called as a
    statement they build an object and drop it; the current device stays GPU 0. (Where a setter is
    called with the same device just before, on every path, or right after, the line is only
    redundant: not reported. Where `init_device_mesh` follows, which sets the device from
    `LOCAL_RANK` if nothing initialized CUDA before it, the finding is a warning; so it is where
    `fully_shard` with no `mesh=` follows, which builds its default mesh with `init_device_mesh`,
    also in the constructor of an object of a class of the checked files built next.
    Where CUDA is initialized on every path before either (`.cuda()`, `torch.cuda.current_device()`,
    `torch.accelerator.current_device_index()`), the mesh sets no device: an error.) Every rank then
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
        from fsdplint.rulekit import at, calls, code, is_simple_statement, via, where

        for flow in program.flows:
            if not flow.is_entry:
                continue  # its callers' flows see what runs after it returns (a mesh built there: plainLM's `main`)
            for event in flow.of_kind(CALL):
                setter = _SETTERS.get(event.qname or "")
                statement = event.statement
                if setter is None or not (is_simple_statement(statement) and isinstance(statement.body[0], cst.Expr)
                                          and statement.body[0].value is event.node):
                    continue
                module = event.qname.rsplit(".", 1)[0]
                if _set_alongside(flow, event):
                    continue
                func = event.node.func
                if isinstance(func, cst.Attribute):
                    operations = [Replace(func, lambda node, setter=setter: node.with_changes(attr=cst.Name(setter)))]
                else:  # imported by name: `from torch.accelerator import device_index`
                    operations = [Replace(func, lambda _, setter=setter: cst.Name(setter)), AddImport(module, (setter,))]
                setter_call = f"{module}.{setter}"
                mesh = _mesh_built_after(flow, event)
                builder = None if mesh is None else f"`init_device_mesh` (at {where(mesh)})" if mesh.kind == CALL else \
                    f"`fully_shard` with no `mesh=` (at {where(mesh)}) builds its mesh with `init_device_mesh`, which"
                caveat = f"; {builder} sets the device from LOCAL_RANK only where nothing initialized CUDA before it" if mesh else ""
                yield Finding(event.file, event.node,
                              f"`{code(event, event.node)}` is a context manager: alone on a line it sets no device{via(event)}; "
                              f"call `{setter_call}(...)`{caveat}",
                              Fix(f"Call `{setter_call}`", safe=True, operations=operations),
                              severity=Severity.WARNING if mesh else None,
                              related=(*((at(mesh, "device mesh built here"),) if mesh else ()), *calls(flow, event)))


def _set_alongside(flow, event) -> bool:
    """A setter is given the same device (the same variable, or the same literal) by the last setter
    call before the statement, on every path to it (physicsnemo's `torch.cuda.set_device(device)` then
    `torch.cuda.device(device)`), or by the call that runs next, wherever the statement runs
    (small-ablation's `torch.accelerator.device_index(rank)` then `torch.cuda.set_device(rank)`):
    the line is only redundant."""
    from fsdplint.model import CALL

    earlier = [other for other in flow.of_kind(CALL) if other.index < event.index and other.qname in _SETTER_CALLS and not other.exclusive(event)]
    following = flow.events[event.index + 1] if event.index + 1 < len(flow.events) else None
    candidates = []
    if earlier and earlier[-1].on_every_path_to(event):
        candidates.append(earlier[-1])
    if following is not None and following.kind == CALL and following.qname in _SETTER_CALLS and following.arms == event.arms:
        candidates.append(following)
    return any(_same_device(setter, event) for setter in candidates)


def _mesh_built_after(flow, event):
    """`init_device_mesh` called later wherever the statement runs, on no device written as the CPU, or
    `fully_shard` with no `mesh=`, which builds its default mesh with it (torch 2.13's
    `_init_default_fully_shard_mesh`, on the accelerator: fredstoolbox/pyFSDP2): it sets the device from
    LOCAL_RANK while CUDA is not yet initialized (small-ablation's scripts), which the model cannot tell.
    Also in the constructor of an object of a class of the run built later (plainLM's `TorchEngine(...)`,
    whose `__init__` shards with no `mesh=`), by what it does wherever it runs."""
    from fsdplint.model import CALL, CALL_VALUE, METHOD, SHARD

    for other in flow.of_kind(CALL, SHARD, METHOD, CALL_VALUE):
        if other.index <= event.index or not other.on_every_path_to(event):
            continue
        step = _device_step(flow, other)
        if step is not None:
            return None if step is _CUDA_INITIALIZED else step
    return None


_CUDA_INITIALIZED = object()  # a step past which a mesh built later sets no device


def _device_step(flow, other):
    """What `other` does to the device a mesh built later sets: initializes CUDA (`_CUDA_INITIALIZED`),
    builds a mesh that sets the device (the event that builds it), or neither (None)."""
    import libcst as cst

    from fsdplint import distributed
    from fsdplint.model import CALL, CALL_VALUE, METHOD, SHARD
    from fsdplint.rulekit import written_device_type

    if other.kind == METHOD and other.method == "cuda" or other.kind == CALL and other.qname in _INITIALIZES_CUDA:
        return _CUDA_INITIALIZED  # CUDA is initialized on every path past the statement: a mesh built later sets no device
    if other.kind == SHARD and "mesh" not in other.kwargs:
        return other
    if other.kind == CALL and other.qname in distributed.INIT_DEVICE_MESH:
        device = other.argument(0, "device_type")
        if device is None or written_device_type(other, device[0]) != "cpu":
            return other
    if other.kind in (CALL, CALL_VALUE) and type(other.node) is cst.Call:
        # Through a package's re-export too (plainLM's `from engine import TorchEngine`): one lookup per construction past the statement.
        found = flow.program.class_built_by_event(other, through_packages=True)
        constructor = flow.program.constructor_flow(*found) if found is not None else None
        for inner in constructor.of_kind(CALL, SHARD, METHOD) if constructor is not None else ():
            step = _device_step(constructor, inner) if inner.unconditional else None
            if step is not None:
                return step
    return None


def _same_device(setter, event) -> bool:
    if not setter.args or not event.args:
        return False
    set_to, meant = setter.args[0], event.args[0]
    return set_to.ref is not None and set_to.ref == meant.ref or set_to.constant is not None and set_to.constant == meant.constant
