from __future__ import annotations

from typing import Iterable

from fsdplint import distributed
from fsdplint.rule import Finding, FixAvailability, Rule, Severity

# FullyShardedDataParallel keywords that decide the device itself: with any of them the module's
# device at the wrap is not the device it trains on (or is meant to stay on the CPU).
_DEVICE_DECIDING = frozenset({"device_id", "param_init_fn", "cpu_offload", "device_mesh"})
# Methods that move a module, or may: `apply(fn)` runs a function on every sub-module.
_MOVES = distributed.MODULE_MOVES | {"apply"}


class Fsdp1ModuleOnCpu(Rule):
    """
    ## What it does
    Finds `FullyShardedDataParallel(module)` of a module left on the CPU (built with no
    `.to(device)`, `.cuda()` or `device=` before the wrap) with no `device_id`, in a CUDA job
    (its process group's backend is NCCL, or it moves tensors to CUDA).

    ## Why is this bad?
    Without `device_id`, FSDP1 leaves the module where it is and only warns ("The passed-in
    `module` is on CPU and will thus have FSDP's sharding initialization run on CPU"), but it
    computes on the current GPU. The first forward (or an earlier call that initializes FSDP, such
    as `summon_full_params` or `clip_grad_norm_`) then fails on every rank:
    `RuntimeError: An FSDP-managed module unexpectedly has parameters on cpu. Make sure to move the
    module to cuda:0 before training.` (torch 2.13, raised by `_check_flat_params_on_expected_device`
    in `torch/distributed/fsdp/_runtime_utils.py`; PyTorch's own FSDP tests expect this message for
    `FSDP(nn.Linear(10, 10))` followed by a forward). With `sync_module_states=True` the wrap itself fails:
    `ValueError: The module has CPU parameters or buffers when `sync_module_states=True`, which
    requires them to be on GPU. Please specify the `device_id` argument or move the module to GPU
    before passing it to FSDP.` (`_check_module_states_for_sync_module_states` in `_init_utils.py`).

    The module's device must be known: it is built in the same script by a `torch.nn` class, or by a
    class of the checked files whose constructor names no device and builds nothing else; nothing
    moves it or hands it to unknown code before the wrap or (for the first message) between the
    wrap and its first forward. Wraps with `param_init_fn`, `cpu_offload` or `device_id`, modules
    built on the meta device or under a device context, and programs that set a default device are
    not reported. An `auto_wrap_policy` does not change the outcome: the nested instances it makes
    inherit the same missing `device_id`.

    ## Example
    ```python
    dist.init_process_group("nccl")
    model = FSDP(Transformer(), auto_wrap_policy=policy)
    ```

    ## Use instead
    ```python
    dist.init_process_group("nccl")
    model = FSDP(Transformer(), auto_wrap_policy=policy, device_id=torch.cuda.current_device())
    ```

    ## Fix safety
    Unsafe: `device_id=torch.cuda.current_device()` moves the module to the current GPU, which is
    this process's GPU only if the script chose it (`torch.cuda.set_device(local_rank)`) before the
    wrap; otherwise every rank lands on GPU 0. The fix is offered only when `torch` is imported.

    ## References
    - [FullyShardedDataParallel device_id](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel)
    - [FSDP tutorial](https://pytorch.org/tutorials/intermediate/FSDP_tutorial.html)
    """

    code = "FSDP405"
    name = "fsdp1-module-on-cpu"
    summary = "FSDP1 wrap of a module left on the CPU, without `device_id`, in a CUDA job"
    severity = Severity.ERROR
    fix_availability = FixAvailability.UNSAFE
    trigger_tokens = ("FullyShardedDataParallel",)

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.model import CALL, WRAP
        from fsdplint.model.devices import builds_on_default_device
        from fsdplint.rulekit import at, calls, code, via, where

        for flow in program.flows:
            for wrap in flow.of_kind(WRAP):
                node = wrap.node
                positional = [arg for arg in node.args if arg.keyword is None]
                if any(arg.star for arg in node.args) or len(positional) > 1 or any(
                        arg.keyword is not None and arg.keyword.value in _DEVICE_DECIDING for arg in node.args):
                    continue
                module = wrap.args[0] if wrap.args else wrap.kwargs.get("module")
                built = flow.origin(module, wrap.index) if module is not None else None
                if built is None or built.contexts or not built.on_every_path_to(wrap) \
                        or not builds_on_default_device(program, built):
                    continue
                start = built.index if built.index >= 0 else wrap.index
                root = module.ref.root if module.ref is not None else None
                before = flow.events[:wrap.index]
                if any(e.kind == CALL and e.qname in distributed.DEFAULT_DEVICE_SETTERS and not e.exclusive(wrap) for e in before):
                    continue  # the program builds on another default device
                if root is not None and (flow.escapes(module.ref, start, wrap.index)
                                         or any(_may_move(e, root) for e in flow.events[start:wrap.index])):
                    continue  # moved (or maybe moved) before the wrap
                evidence = _cuda_evidence(flow, wrap)
                if evidence is None:
                    continue
                sync = any(arg.keyword is not None and arg.keyword.value == "sync_module_states" and getattr(arg.value, "value", None) == "True"
                           for arg in node.args)
                if sync:
                    consequence = ("the wrap itself fails: \"The module has CPU parameters or buffers when `sync_module_states=True`, "
                                   "which requires them to be on GPU\"")
                    related = ()
                else:
                    forward = _first_forward(flow, wrap)
                    if forward is None:
                        continue
                    consequence = (f"its first forward (at {where(forward)}), or an earlier call that initializes it, fails: "
                                   "\"An FSDP-managed module unexpectedly has parameters on cpu\"")
                    related = (at(forward, "first forward here"),)
                shown = code(wrap, node.args[0].value) if node.args else "module"
                yield Finding(wrap.file, node,
                              f"`FullyShardedDataParallel` wraps `{shown}`, left on the CPU (built at {where(built)}), without `device_id`, "
                              f"in a CUDA job ({evidence}){via(wrap)}: FSDP1 does not move it, and {consequence}; pass "
                              f"`device_id=torch.cuda.current_device()` or move the module to its GPU first",
                              self._fix(wrap), related=(at(built, "module built here"), *related, *calls(flow, wrap)))

    @staticmethod
    def _fix(wrap):
        import libcst as cst

        from fsdplint.fixes import Fix, Replace, generated_layout, line_limit
        from fsdplint.rulekit import qualified_reference

        torch = qualified_reference(wrap.file, "torch")
        if torch is None:
            return None
        added = f"device_id={torch}.cuda.current_device()"
        call = wrap.file.code(wrap.node)
        start = wrap.file.position(wrap.node).start
        line = wrap.file.source.text.splitlines()[start.line - 1]
        if "\n" not in call and len(line) + len(added) + 2 > line_limit(wrap.file):
            # Wrapped as black wraps a call: one argument a line, indented one unit past the statement.
            indent = line[:len(line) - len(line.lstrip())]
            unit = generated_layout(wrap.file)[0]
            arguments = [wrap.file.code(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip() for arg in wrap.node.args] + [added]
            text = f"{wrap.file.code(wrap.node.func)}(\n" + "".join(f"{indent}{unit}{argument},\n" for argument in arguments) + f"{indent})"
            return Fix("Pass `device_id=torch.cuda.current_device()`", safe=False,
                       operations=[Replace(wrap.node, lambda _: cst.parse_expression(text))])

        def rewrite(call: cst.Call) -> cst.Call:
            args = list(call.args)
            last = args[-1]
            if last.comma is cst.MaybeSentinel.DEFAULT:
                args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            return call.with_changes(args=[*args, cst.Arg(cst.parse_expression(added.split("=", 1)[1]), keyword=cst.Name("device_id"),
                                                          equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))])

        return Fix("Pass `device_id=torch.cuda.current_device()`", safe=False, operations=[Replace(wrap.node, rewrite)])


def _acts_on(event, root: str) -> bool:
    return any(target.root == root for target in event.targets)


def _may_move(event, root: str) -> bool:
    """The event may change the device of the module `root` (or of a part of it): a move, `apply(fn)`,
    a method given a device, `load_state_dict(..., assign=True)`, the meta device, a sub-module assigned."""
    from fsdplint.model import ASSIGN, META, METHOD
    from fsdplint.rulekit import device_arguments

    if not _acts_on(event, root):
        return False
    if event.kind in (META, ASSIGN):
        return True
    return event.kind == METHOD and (event.method in _MOVES or "assign" in event.kwargs or any(True for _ in device_arguments(event)))


def _first_forward(flow, wrap):
    """The first forward of the wrapped module after the wrap, if nothing moves the wrapped module
    before it (`model = FSDP(model); model.to("cuda")` trains): no move, and no call of unknown code
    that takes it and either stands alone (`move_to_gpu(model)`) or gives the variable a new value
    (`model = prepare(model)`)."""
    from fsdplint.model import CALL_VALUE, METHOD

    wrapped = wrap.binding
    if wrapped is None or wrapped.path:
        return None
    for event in flow.events[wrap.index + 1:]:
        if event.exclusive(wrap) or not _acts_on(event, wrapped.root) and not any(ref.root == wrapped.root for ref in event.arg_refs()):
            continue
        if event.kind == CALL_VALUE and event.target == wrapped:
            return event if wrap.on_every_path_to(event) else None
        if event.kind == METHOD and event.method in _MOVES:
            return None
        if flow.escapes(wrapped, event.index, event.index + 1) and (event.binding is None or event.binding.root == wrapped.root):
            return None
    return None


def _cuda_evidence(flow, wrap) -> str | None:
    """What says the job runs on CUDA, not in another arm than the wrap: an NCCL process group, or a
    tensor moved to CUDA (`.cuda()`, `.to("cuda")`, `torch.device("cuda", ...)`, `torch.cuda.set_device`)."""
    import libcst as cst

    from fsdplint import distributed
    from fsdplint.model import CALL, METHOD
    from fsdplint.rulekit import device_arguments, process_group_backend, where

    for event in flow.of_kind(CALL, METHOD):
        if event.exclusive(wrap) or type(event.node) is not cst.Call:
            continue
        if event.qname == "torch.distributed.init_process_group" and "nccl" in (process_group_backend(event) or ""):
            return f"an NCCL process group at {where(event)}"
        if event.qname == "torch.cuda.set_device":
            return f"`torch.cuda.set_device` at {where(event)}"
        func = event.node.func
        if type(func) is cst.Attribute and func.attr.value == "cuda" and not distributed.is_torch_name(event.qname or ""):
            return f"`.cuda()` at {where(event)}"
        for node, _ in device_arguments(event):
            literal = node.args[0].value if type(node) is cst.Call and event.file.qualify(node.func) == "torch.device" and node.args else node
            if type(literal) is cst.SimpleString and literal.evaluated_value.startswith("cuda"):
                return f"the device `{event.file.code(node).strip()}` at {where(event)}"
    return None
