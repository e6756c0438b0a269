from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity


class ForwardBeforeOptimizer(Rule):
    """
    ## What it does
    Finds a forward of a sharded root module (a sanity check, an evaluation) between its
    `fully_shard` and the construction of its optimizer, with no `model.reshard()` in between.

    ## Why is this bad?
    After a forward, the root module stays unsharded (its `reshard_after_forward` defaults to
    False). The optimizer built then sees the root's unsharded plain tensors instead of its
    DTensor parameters, so `model.parameters()` mixes DTensor and plain `Parameter` objects and the
    root's parameters are never updated. Nothing fails: the model just trains worse. A backward
    after the forward reshards the root again, so a training step before the optimizer is not
    reported. When a helper builds the optimizer, the caller's call of it is reported (the helper
    is right), with the optimizer's line in the helper as a related location.

    ## Example
    ```python
    fully_shard(model)
    model(warmup_batch)
    optimizer = torch.optim.AdamW(model.parameters())
    ```

    ## Use instead
    ```python
    fully_shard(model)
    model(warmup_batch)
    model.reshard()
    optimizer = torch.optim.AdamW(model.parameters())
    ```

    ## Fix safety
    Safe: `reshard()` only frees the unsharded parameters, which the next forward gathers again.
    Where the module is sharded on some paths only (`if args.fsdp:`), it is unsafe: the plain module
    of the other paths has no `reshard()`.

    ## References
    - [pytorch/pytorch#149205](https://github.com/pytorch/pytorch/issues/149205)
    - [FSDPModule.reshard](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
    """

    code = "FSDP108"
    name = "forward-before-optimizer"
    summary = "Forward between `fully_shard` and the optimizer without `reshard()`"
    severity = Severity.ERROR
    fix_availability = FixAvailability.SOMETIMES_SAFE

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.fixes import Fix, InsertBefore, parse_statements
        from fsdplint.model import CALL_VALUE, METHOD, OPTIMIZER
        from fsdplint.rulekit import at, caller_site, calls, code, is_backward, is_simple_statement, safe_where_sharded, via, where

        for flow in program.flows:
            for optimizer in flow.of_kind(OPTIMIZER):
                for module in optimizer.params_of:
                    shard = flow.sharding_of(module, optimizer.index, fsdp=2)
                    if shard is None or module not in shard.targets:
                        continue
                    between = flow.events[shard.index + 1:optimizer.index]
                    forwards = [e for e in between if e.kind == CALL_VALUE and e.target == module]
                    if not forwards:
                        continue
                    resharded = any(e.kind == METHOD and e.method == "reshard" and e.target == module and e.index > forwards[-1].index for e in between)
                    # A backward reshards the root too (`reshard_after_backward`): a training step is fine,
                    # whatever the backward is called on (`out.mean().backward()`, `torch.autograd.backward(loss)`).
                    backward = any(e.index > forwards[-1].index and is_backward(e) for e in between)
                    if resharded or backward:
                        continue
                    forward = forwards[-1]
                    name = code(forward, forward.node.func)
                    # A helper that builds the optimizer is right; its caller calls it before resharding.
                    helper_call = caller_site(flow, optimizer, forward)
                    built = helper_call or optimizer
                    fix = None
                    if forward.chain == built.chain and forward.file is built.file and is_simple_statement(built.statement):
                        fix = safe_where_sharded(Fix(f"Call `{name}.reshard()` before building the optimizer", safe=True,
                                                     operations=[InsertBefore(built.statement, parse_statements(built.file, f"{name}.reshard()\n"))]),
                                                 shard, built)
                    if helper_call is None:
                        what, related = "this optimizer", (at(forward, "forward here"), *calls(flow, optimizer))
                    else:
                        what = f"`{code(helper_call, helper_call.node.func)}(...)` builds an optimizer that"
                        related = (at(optimizer, "optimizer built here"), at(forward, "forward here"), *calls(flow, optimizer, below=helper_call.node))
                    yield Finding(built.file, built.node,
                                  f"`{name}` ran a forward (at {where(forward)}) after `fully_shard` and was not resharded, so {what} "
                                  f"gets its unsharded root parameters, which never update{via(optimizer)}; call `{name}.reshard()` first", fix,
                                  related=related)
                    break
