from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity

_TORCH_CLIP = ("torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_norm_")
# The arguments `FullyShardedDataParallel.clip_grad_norm_(max_norm, norm_type=2.0)` takes.
_KEPT_ARGUMENTS = ("max_norm", "norm_type")


class LocalClipGradNormOnFsdp1(Rule):
    """
    ## What it does
    Finds `torch.nn.utils.clip_grad_norm_(model.parameters(), ...)` on a model wrapped in FSDP1's
    `FullyShardedDataParallel`.

    ## Why is this bad?
    Under FSDP1 each rank holds only its shard of every gradient. `torch.nn.utils.clip_grad_norm_`
    computes the norm of the gradients it is given, so each rank clips by the norm of its own
    shard: the ranks clip by different factors, none of them the true one, and the returned norm
    (often logged) is wrong too (observed: 0.2387 on rank 0, 0.7709 on rank 1, where the norm of
    the whole gradient is 0.8070). `FullyShardedDataParallel.clip_grad_norm_` reduces the norm
    across ranks first.

    For FSDP2 (`fully_shard`) it is the other way round: the gradients are DTensors,
    `torch.nn.utils.clip_grad_norm_` is the right call, and the module has no `clip_grad_norm_`
    method (see FSDP105). A module with `sharding_strategy=ShardingStrategy.NO_SHARD` holds whole
    gradients and is not reported, nor is a clip under a test of whether the module shards (torch's
    own `clip_grad_norm_` clips locally `if` no handle `uses_sharded_strategy`, and code copies it).

    ## Example
    ```python
    model = FSDP(model, auto_wrap_policy=policy)
    ...
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    ```

    ## Use instead
    ```python
    model.clip_grad_norm_(1.0)
    ```

    ## Fix safety
    Safe: the method takes the same `max_norm` and `norm_type` and returns the total norm as
    well, computed over all shards. The fix is offered when the parameters are
    `model.parameters()` of the wrapped root module, `model` written as the wrap's result was
    assigned (`model = FSDP(model, ...)`, or `model = prepare(model)` of a helper that returns the
    wrap; after `fsdp_model = FSDP(model)`, `model` is the plain module, which has no such method),
    and the call runs on every rank (the method is a collective); other arguments (`foreach`,
    `error_if_nonfinite`) have no counterpart, so such calls get no fix. Where the module is wrapped on some paths only (`if args.fsdp:`), the fix is
    unsafe: the plain or DDP module of the other paths has no `clip_grad_norm_`.

    ## References
    - [FullyShardedDataParallel.clip_grad_norm_](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.clip_grad_norm_)
    - [torch.nn.utils.clip_grad_norm_](https://pytorch.org/docs/stable/generated/torch.nn.utils.clip_grad_norm_.html)
    """

    code = "FSDP402"
    name = "local-clip-grad-norm-on-fsdp1"
    summary = "`torch.nn.utils.clip_grad_norm_` on an FSDP1 model clips each rank by its local norm"
    severity = Severity.ERROR
    fix_availability = FixAvailability.SOMETIMES_SAFE
    trigger_tokens = ("FullyShardedDataParallel", "clip_grad_norm_")

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.model import CALL, FSDP1_WRAPPER
        from fsdplint.model.strategies import shards_nothing
        from fsdplint.rulekit import at, calls, code, safe_where_sharded, via, where

        for flow in program.flows:
            for event in flow.of_kind(CALL):
                if event.qname not in _TORCH_CLIP or not event.args or flow.under_type_test(event):
                    continue  # not a clip, or one that runs only where a test of the module's sharding says (torch's own NO_SHARD path)
                wrapped = [(module, wrap) for module in sorted(event.args[0].params_of, key=str)
                           if (wrap := flow.sharding_of(module, event.index, fsdp=1)) is not None and not shards_nothing(wrap, event)
                           and not wrap.excludes(event) and flow.isinstance_known(event, module, (FSDP1_WRAPPER,)) is not False]
                if not wrapped:
                    continue
                module, wrap = wrapped[0]
                parameters = event.node.args[0].value
                root = _parameters_of(parameters) if module in wrap.targets else None
                if root is not None and not (_holds_the_wrapper(root, wrap) or _returned_by(event.args[0], wrap)):
                    root = None  # `fsdp_model = FSDP(model)`, then `model.parameters()`: the inner module has no `clip_grad_norm_`
                advice = f"`{code(event, root)}.clip_grad_norm_(max_norm)`" if root is not None else \
                    "`clip_grad_norm_(max_norm)` on the root `FullyShardedDataParallel` module"
                yield Finding(event.file, event.node,
                              f"`torch.nn.utils.clip_grad_norm_` on `{code(event, parameters)}`, of a module wrapped in "
                              f"`FullyShardedDataParallel` (at {where(wrap)}){via(event)}: each rank clips by the norm of its "
                              f"own gradient shard; call {advice}, which reduces the norm over all ranks",
                              safe_where_sharded(self._fix(event, root), wrap, event),
                              related=(at(wrap, "wrapped here"), *calls(flow, event)))

    @staticmethod
    def _fix(event, root):
        """`torch.nn.utils.clip_grad_norm_(model.parameters(), *rest)` -> `model.clip_grad_norm_(*rest)`."""
        import libcst as cst

        from fsdplint.fixes import Fix, Replace
        from fsdplint.rulekit import code

        # The method is a collective of the root wrapper: only for `root.parameters()`, on every rank.
        if root is None or event.rank_guards:
            return None
        rest = event.node.args[1:]
        if len(rest) > len(_KEPT_ARGUMENTS) or any(arg.star or arg.keyword is not None and arg.keyword.value not in _KEPT_ARGUMENTS for arg in rest):
            return None

        def rewrite(call: cst.Call) -> cst.Call:
            return call.with_changes(func=cst.Attribute(call.args[0].value.func.value, cst.Name("clip_grad_norm_")), args=call.args[1:])

        return Fix(f"Call `{code(event, root)}.clip_grad_norm_(...)`, which reduces the norm over all ranks", safe=True,
                   operations=[Replace(event.node, rewrite)])


def _holds_the_wrapper(receiver, wrap) -> bool:
    """`receiver` is written as what the wrap's result was assigned to (`model = FSDP(model, ...)`,
    `self.model = FSDP(...)`, or `self.model = prepare(model)` where `prepare` returns the wrap, as
    `return FSDP(...)` or as the variable it assigned it to). The model reads a wrap and the module it
    wraps as one object, but only the wrapper has `clip_grad_norm_`: after `fsdp_model = FSDP(model)`,
    `model` is the plain module."""
    import libcst as cst

    from fsdplint.model import dotted_name
    from fsdplint.model.syntax import is_whole_statement, returned_names

    def assigned(statement, node) -> str | None:
        """The name or attribute `statement` assigns `node` to, as `self.model`; None where it does not."""
        if not is_whole_statement(statement, node) or type(statement.body[0]) is not cst.Assign or len(statement.body[0].targets) != 1:
            return None
        target = statement.body[0].targets[0].target
        return dotted_name(target) if type(target) in (cst.Name, cst.Attribute) else None

    written = dotted_name(receiver)
    name = assigned(wrap.statement, wrap.node)
    if written is None or name == written:
        return written is not None
    returned = is_whole_statement(wrap.statement, wrap.node) and type(wrap.statement.body[0]) is cst.Return or \
        name is not None and wrap.function is not None and set(returned_names(wrap.function.node.body)) == {name}
    # the helper returns it (every `return` of it returns that variable): what the call's own statement assigns
    return returned and bool(wrap.call_sites) and bool(wrap.outer) and assigned(wrap.outer[-1], wrap.call_sites[-1]) == written


def _returned_by(parameters, wrap) -> bool:
    """`parameters` are `x.parameters()` of an `x` that holds what the wrap returned (a parameter its
    caller passed `dist_model = FSDP(model)` for: minChatGPT's `train_epoch(dist_model, epoch)`)."""
    taken = parameters.event
    return taken is not None and taken.value is not None and taken.value.event is not None and taken.value.event.node is wrap.node


def _parameters_of(node):
    """`model` for `model.parameters()`, else None."""
    import libcst as cst

    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "parameters" and not node.args:
        return node.func.value
    return None
