from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity

# Calls that take the model and the optimizer together re-bind the optimizer to the wrapped model.
_REBINDING_METHODS = ("prepare", "setup", "setup_optimizers", "initialize", "wrap")


class OptimizerBeforeSharding(Rule):
    """
    ## What it does
    Finds an optimizer built over a model's parameters before that model is sharded with
    `fully_shard` or wrapped in `FullyShardedDataParallel`.

    ## Why is this bad?
    Sharding replaces the model's `Parameter` objects (with DTensors for FSDP2, with flat
    parameters for FSDP1). The optimizer keeps the old ones, which no longer receive gradients:
    `optimizer.step()` updates nothing, its state stays empty, and no warning is printed
    (observed: 0 of 8 parameters changed after 3 steps). FSDP1 with `use_orig_params=True` keeps
    the original `Parameter` objects (as views into its flat parameters), so an optimizer built
    before that wrap still trains the model: it is not reported (observed: 4 of 4 changed). Where
    `use_orig_params=` is given a value fsdplint does not know (or may come in a `**` argument),
    it is not reported either.

    Frameworks that re-bind the optimizer to the wrapped model
    (`accelerator.prepare(model, optimizer)`, `fabric.setup(model, optimizer)`) are not reported.
    When a helper builds the optimizer (`optimizer = build_optimizer(model)` before
    `apply_fsdp(model)`), the helper is right and its caller calls it too early: the call is
    reported, with the optimizer's line in the helper as a related location.

    ## Example
    ```python
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    fully_shard(model)
    ```

    ## Use instead
    ```python
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ```

    ## Fix safety
    Unsafe: the fix moves the optimizer's construction (or the call of the helper that builds it)
    after the last sharding call of the same block (or the call of the helper that shards). It is
    offered only when nothing uses the optimizer in between.

    ## References
    - [FSDP2 tutorial](https://pytorch.org/tutorials/intermediate/FSDP_tutorial.html)
    - [FullyShardedDataParallel](https://pytorch.org/docs/stable/fsdp.html)
    """

    code = "FSDP104"
    name = "optimizer-before-sharding"
    summary = "Optimizer built before the model is sharded: it updates nothing"
    severity = Severity.ERROR
    fix_availability = FixAvailability.UNSAFE

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.fixes import Fix, MoveAfter
        from fsdplint.model import OPTIMIZER
        from fsdplint.rulekit import anchor_in_block, at, caller_site, calls, code, is_simple_statement, via, where

        for flow in program.flows:
            for optimizer in flow.of_kind(OPTIMIZER):
                for module in optimizer.params_of:
                    later = [e for e in flow.shard_events() if e.index > optimizer.index and not e.excludes(optimizer)
                             and _replaces_parameters(e) and any(module.overlaps(t) for t in e.targets)]
                    if not later or self._rebuilt_or_rebound(flow, optimizer, module, later[0]):
                        continue
                    # A helper that builds the optimizer is right; its caller calls it too early.
                    helper_call = caller_site(flow, optimizer, later[0])
                    built = helper_call or optimizer
                    fix = None
                    anchor = anchor_in_block(built, later[-1])
                    uses = [e for e in flow.events[optimizer.index + 1:later[-1].index]
                            if optimizer.binding and any(r.root == optimizer.binding.root for r in (*e.targets, *e.arg_refs()))]
                    if anchor is not None and is_simple_statement(built.statement) and not uses and "parameters(" in code(optimizer, optimizer.node):
                        fix = Fix("Build the optimizer after the model is sharded", safe=False,
                                  operations=[MoveAfter(built.statement, anchor)])
                    api = "fully_shard" if later[0].kind == "shard" else "FullyShardedDataParallel"
                    if helper_call is None:
                        what, related = "the optimizer is built", (at(later[0], "sharded here"), *calls(flow, optimizer))
                    else:
                        what = f"`{code(helper_call, helper_call.node.func)}(...)` builds the optimizer"
                        related = (at(optimizer, "optimizer built here"), at(later[0], "sharded here"), *calls(flow, optimizer, below=helper_call.node))
                    yield Finding(built.file, built.node,
                                  f"{what} before `{api}` replaces the parameters it holds "
                                  f"(at {where(later[0])}){via(optimizer)}: it will update nothing; build it after sharding", fix,
                                  related=related)
                    break

    @staticmethod
    def _rebuilt_or_rebound(flow, optimizer, module, shard) -> bool:
        """After the shard, on a path it runs on (not in another arm), the optimizer is built again or
        handed to something that re-maps its parameters."""
        from fsdplint.model import METHOD, OPTIMIZER

        for event in flow.events[shard.index:]:
            if event.excludes(shard):
                continue
            if event.kind == OPTIMIZER and event.binding is not None and optimizer.binding is not None \
                    and event.binding.variable == optimizer.binding.variable and event.binding.path == optimizer.binding.path:
                return True  # the same variable is built again after sharding
            refs = {r.root for r in event.arg_refs()}
            # `accelerator.prepare(model, optimizer)`, or a helper re-mapping the optimizer's parameters.
            if optimizer.binding and optimizer.binding.root in refs and (
                module.root in refs or event.kind == METHOD and event.method in _REBINDING_METHODS
            ):
                return True
        return False


def _replaces_parameters(shard) -> bool:
    """`fully_shard` does; `FullyShardedDataParallel` unless `use_orig_params=` is anything but `False`
    (`True` keeps the original parameters; a value not known may be `True`)."""
    from fsdplint.model import SHARD

    if shard.kind == SHARD:
        return True
    keeps = shard.kwargs.get("use_orig_params")
    if keeps is None:  # the default, False, unless a `**` argument may give it
        return not any(arg.star == "**" for arg in shard.node.args)
    return keeps.constant == "False"
