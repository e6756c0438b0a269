from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity



class ForwardBypassesHooks(Rule):
    """
    ## What it does
    Finds `model.forward(x)` on a module sharded with `fully_shard`.

    ## Why is this bad?
    FSDP2 all-gathers a module's parameters in a hook that `nn.Module.__call__` runs before
    `forward`. Calling `forward` directly skips it: the parameters are still sharded DTensors and
    the first operation fails with `RuntimeError: aten.addmm.default got mixed torch.Tensor and
    DTensor, need to convert all torch.Tensor to DTensor before calling distributed operators!`.
    Calling `unshard()` first makes it run, but the gradients of the root are then never reduced.
    The same holds for another method that runs the forward computation by calling `forward` itself:
    where the checked code defines it (`def generate(self, ...): ... self.forward(...)`), its
    `self.forward` is reported. A library's method is not: Hugging Face's `generate` calls `self(...)`,
    which runs the hooks.

    ## Example
    ```python
    fully_shard(model)
    loss = model.forward(x).sum()
    ```

    ## Use instead
    ```python
    fully_shard(model)
    loss = model(x).sum()
    ```
    For another method that calls `forward` itself, register it after sharding so that it runs the
    hooks: `register_fsdp_forward_method(model, "generate")`.

    ## Fix safety
    The fix is safe: `model(x)` runs the same `forward` with FSDP's hooks around it.

    ## References
    - [fully_shard](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
    - [FSDP2 tutorial](https://pytorch.org/tutorials/intermediate/FSDP_tutorial.html)
    """

    code = "FSDP103"
    name = "forward-bypasses-hooks"
    summary = "`forward` called directly on a sharded module skips FSDP's hooks"
    severity = Severity.ERROR
    fix_availability = FixAvailability.SAFE

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.fixes import Fix, Replace
        from fsdplint.model import METHOD, Managed
        from fsdplint.rulekit import at, calls, code, via, where

        for flow in program.flows:
            for event in flow.of_kind(METHOD):
                if event.method != "forward" or flow.runs_hooks(event.target, event.method):
                    continue
                # Hooks are a unit's own: a part of a sharded module that no `fully_shard` was given has
                # none to skip (its parameters are gathered by its unit's, around the unit's forward).
                shard = flow.sharding_of(event.target, event.index, fsdp=2, how=Managed.UNIT)
                if shard is None:
                    continue
                receiver = code(event, event.node.func.value)
                fix = Fix(f"Call `{receiver}(...)` so the FSDP hooks run", safe=True,
                          operations=[Replace(event.node, lambda call: call.with_changes(func=call.func.value))])
                yield Finding(event.file, event.node,
                              f"`{receiver}.forward(...)` skips FSDP2's hooks, so its parameters are never all-gathered "
                              f"(sharded at {where(shard)}){via(event)}; call `{receiver}(...)`", fix,
                              related=(at(shard, "sharded here"), *calls(flow, event)))
