from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity

# `FullyShardedDataParallel(module, process_group, sharding_strategy, cpu_offload, auto_wrap_policy, ...)`
_POLICY_POSITION = 4


class Fsdp1WithoutAutoWrap(Rule):
    """
    ## What it does
    Finds `FullyShardedDataParallel(model)` (FSDP1) with no `auto_wrap_policy`, or with a policy
    that ignores its `recurse` argument and decides by the module alone (not by its size), on a model
    none of whose sub-modules was wrapped first.

    ## Why is this bad?
    FSDP1 wraps exactly what the policy tells it to. With no policy the whole model becomes one
    flat parameter: every parameter is all-gathered at once before the forward, nothing overlaps
    with compute, and the peak memory is that of the unsharded model, which is what FSDP was meant
    to avoid. A policy is called with `recurse=True` to ask whether to descend into a module's
    children; a function such as `lambda module, recurse, nonwrapped_numel: isinstance(module,
    Block)` answers no for the root, so FSDP never reaches the blocks and the effect is the same.

    Not reported: a model known to hold no blocks (a single layer such as `torch.nn.Linear`, an
    `nn.Sequential` of such layers, an `nn.Module` class of the checked files whose `__init__` builds
    only such layers), a model whose blocks were wrapped one by one before the root, a module taken
    from another's children and wrapped on its own (`for name, child in model.named_children():
    FSDP(child)`, or by a function that calls itself on the children: a part, not the model), `sharding_strategy=ShardingStrategy.NO_SHARD` (nothing is
    all-gathered), and calls whose keyword arguments come from `**kwargs`.

    ## Example
    ```python
    model = FSDP(model, device_id=local_rank)
    ```

    ## Use instead
    ```python
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    model = FSDP(model, device_id=local_rank, auto_wrap_policy=ModuleWrapPolicy({Block}))
    ```

    ## Fix safety
    No fix: which module class is a unit is a choice about the model.

    ## References
    - [FullyShardedDataParallel: auto_wrap_policy](https://pytorch.org/docs/stable/fsdp.html)
    - [FSDP1 tutorial: auto wrap policy](https://pytorch.org/tutorials/intermediate/FSDP_advanced_tutorial.html)
    """

    code = "FSDP401"
    name = "fsdp1-without-auto-wrap"
    summary = "FSDP1 wrap with no `auto_wrap_policy` (or one that ignores `recurse`): one flat unit"
    severity = Severity.WARNING
    fix_availability = FixAvailability.NONE
    trigger_tokens = ("FullyShardedDataParallel",)

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.model.values import ANY_ELEMENT, SELF_OR_BELOW
        from fsdplint.model.strategies import shards_nothing
        from fsdplint.rulekit import calls, code, is_leaf_or_part, via

        for flow in program.flows:
            if not flow.is_entry:
                continue  # its callers' flows see what was wrapped before it
            wraps = list(flow.shard_events(fsdp=1))
            for event in wraps:
                args = event.node.args
                positional = [arg for arg in args if arg.keyword is None and not arg.star]
                if not positional or any(arg.star == "**" for arg in args) or len(positional) > _POLICY_POSITION:
                    continue
                problem = self._policy_problem(program, flow, event)
                if problem is None or event.target is None or shards_nothing(event):
                    continue  # with NO_SHARD nothing is all-gathered: one unit costs nothing
                root = event.target
                if ANY_ELEMENT in root.path or SELF_OR_BELOW in root.path or _wrapped_by_recursion(flow, event, positional[0].value):
                    continue  # one of a module's children (or its modules), wrapped on its own: a part, not the model
                if any(t != root and t.overlaps(root) for other in wraps for t in other.targets):
                    continue  # blocks wrapped one by one, and the model around them
                if flow.sharding_of(root, event.index, fsdp=1) not in (None, event):
                    continue  # an FSDP module wrapped again: its units are the inner wrap's (vectorlm's test)
                if is_leaf_or_part(flow, root, wraps, event):
                    continue
                name = code(event, positional[0].value)
                yield Finding(event.file, event.node,
                              f"`{name}` is wrapped in `FullyShardedDataParallel` {problem}{via(event)}: the whole model is one "
                              f"flat unit, all-gathered at once; pass `auto_wrap_policy=ModuleWrapPolicy({{Block}})` "
                              f"with the model's block class", related=calls(flow, event))

    def _policy_problem(self, program, flow, event) -> str | None:
        """Why the call wraps one unit: "with no `auto_wrap_policy`", "…whose `recurse` is ignored", else None."""
        import libcst as cst

        from fsdplint.model.syntax import reads_name

        # FullyShardedDataParallel(module, process_group, sharding_strategy, cpu_offload, auto_wrap_policy, ...);
        # torch 1.11 named it `fsdp_auto_wrap_policy`.
        given = event.argument(_POLICY_POSITION, "auto_wrap_policy") or event.argument(None, "fsdp_auto_wrap_policy")
        policy = given[0] if given else None
        if given is None or given[1].constant == "None":
            return "with no `auto_wrap_policy`"
        if isinstance(policy, cst.Call) and (event.file.qualify(policy.func) == "functools.partial") and policy.args:
            policy = policy.args[0].value
        if isinstance(policy, cst.Lambda):
            params = [param.name.value for param in policy.params.params]
            body = policy.body
        else:
            function = program.resolve_callable(event.file, event.function, policy)
            if function is None:
                return None
            params = function.params
            body = function.node.body
        # Ignoring `recurse` stops FSDP at the root only where the answer for the root is no: a policy
        # that decides by size (`nonwrapped_numel`, its third parameter) says yes for the large root,
        # and no module below a small one is large, so it wraps as a size policy does.
        by_size = len(params) > 2 and reads_name(body, params[2])
        if "recurse" in params and not reads_name(body, "recurse") and not by_size:
            return f"with an `auto_wrap_policy` that ignores `recurse` (`{event.file.code(policy).strip()}`)"
        return None


def _wrapped_by_recursion(flow, event, wrapped) -> bool:
    """The wrapped module is a parameter of a function that calls itself (wdlctc/lc's `RecursiveVisit(name,
    module, upper)`, which descends into `module.named_children()` and wraps the modules it reaches):
    whichever module the recursion reaches, not the model as such."""
    import libcst as cst

    from fsdplint.model import CALL

    function = event.function
    return (function is not None and type(wrapped) is cst.Name and wrapped.value in function.params
            and any(call.function is function and call.qname == function.qualname for call in flow.of_kind(CALL)))
