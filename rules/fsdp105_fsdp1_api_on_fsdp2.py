from __future__ import annotations

from typing import Iterable

from fsdplint import distributed
from fsdplint.rule import Finding, FixAvailability, Rule, Severity

_FSDP1_METHODS = {
    "no_sync": "use `{m}.set_requires_gradient_sync(False)` … `set_requires_gradient_sync(True)` (no_sync does not exist on FSDP2 modules: AttributeError)",
    "clip_grad_norm_": "use `torch.nn.utils.clip_grad_norm_({m}.parameters(), max_norm)`, which handles DTensor gradients (the method does not exist on FSDP2 modules: AttributeError)",
    "summon_full_params": "use `param.full_tensor()` (summon_full_params is an FSDP1 API)",
    "state_dict_type": "it finds no FSDP1 module to set: `state_dict()` still returns DTensor shards, and leaving "
                       "`with FSDP.state_dict_type(...)` raises `KeyError: None`; use `get_model_state_dict({m}, "
                       "options=StateDictOptions(full_state_dict=True, cpu_offload=True))`",
    "set_state_dict_type": "it finds no FSDP1 module to set: `state_dict()` still returns DTensor shards; use "
                           "`get_model_state_dict({m}, options=StateDictOptions(full_state_dict=True, cpu_offload=True))`",
}
# FSDP1's static methods given the module as their first argument (`FSDP.summon_full_params(model)`).
_FSDP1_STATIC_METHODS = frozenset({"summon_full_params", "state_dict_type", "set_state_dict_type"})


def _fsdp1_static_method(qname: str | None) -> str | None:
    """`summon_full_params` for `torch.distributed.fsdp.FullyShardedDataParallel.summon_full_params`
    (the class by any module that exports it)."""
    owner, _, method = (qname or "").rpartition(".")
    return method if method in _FSDP1_STATIC_METHODS and owner.endswith(".FullyShardedDataParallel") else None


class Fsdp1ApiOnFsdp2Module(Rule):
    """
    ## What it does
    Finds FSDP1 APIs used on a module sharded with FSDP2's `fully_shard`: `model.no_sync()`,
    `model.clip_grad_norm_(...)`, `FSDP.summon_full_params(model)`, `FSDP.state_dict_type(model, ...)`
    and `FSDP.set_state_dict_type(model, ...)`; and
    `model.set_requires_gradient_sync(False)` that is never set back before `optimizer.step()`.

    ## Why is this bad?
    FSDP2 modules do not have FSDP1's methods: `with model.no_sync():` raises `AttributeError:
    '...' object has no attribute 'no_sync'`, and so does `model.clip_grad_norm_(1.0)`.
    `FSDP.summon_full_params(fsdp2_model)` is a silent no-op: the parameters stay local shards.
    `FSDP.set_state_dict_type(fsdp2_model, StateDictType.FULL_STATE_DICT, ...)` finds no FSDP1
    module and changes nothing: `state_dict()` still returns DTensor shards, which a script then
    saves or sends as if they were full weights; `with FSDP.state_dict_type(fsdp2_model, ...):`
    does the same inside and raises `KeyError: None` on leaving (torch 2.13).
    Turning gradient synchronization off and never back on means the gradients of the last
    micro-batch are not reduced either: every rank steps with its own gradients.

    A call under a test that says the object is a DDP or FSDP1 wrapper (`if isinstance(model, DDP)
    and accumulating: with model.no_sync(): ...`, in a script that shards with `fully_shard` on one
    path and wraps in DDP on another) is that wrapper's own method, and is not reported.

    ## Example
    ```python
    with model.no_sync():
        model(x).sum().backward()
    ```

    ## Use instead
    ```python
    model.set_requires_gradient_sync(False)
    try:
        model(x).sum().backward()
    finally:
        model.set_requires_gradient_sync(True)
    ```
    Setting `model.set_requires_gradient_sync(is_last_microbatch)` after the forward and before
    the backward is just as valid. For clipping use `torch.nn.utils.clip_grad_norm_`, and
    `DTensor.full_tensor()` to see a full parameter.

    ## Fix safety
    The fix for `with model.no_sync():` is safe: it turns synchronization off for exactly the body
    and back on even if the body raises, which is what `no_sync` did under FSDP1. Where the module
    is sharded on some paths only (`if args.fsdp:`), it is unsafe: the DDP module of the other paths
    has `no_sync` and no `set_requires_gradient_sync`. The other forms
    have no automatic fix.

    ## References
    - [FSDP2 tutorial: gradient accumulation](https://pytorch.org/tutorials/intermediate/FSDP_tutorial.html)
    - [FSDPModule.set_requires_gradient_sync](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
    """

    code = "FSDP105"
    name = "fsdp1-api-on-fsdp2-module"
    summary = "FSDP1 API (`no_sync`, `clip_grad_norm_`, `summon_full_params`, `state_dict_type`) used on an FSDP2 module"
    severity = Severity.ERROR
    fix_availability = FixAvailability.SOMETIMES_SAFE

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.model import CALL, FSDP1_WRAPPER, FSDP2_METHODS, FSDP2_MODULE, METHOD, Managed
        from fsdplint.rulekit import at, calls, code, no_sync_fix, safe_where_sharded, via, where

        # Objects of these classes wrap a module: where a test says the receiver is one, it is not the
        # module `fully_shard` was applied to (which keeps its own class), and their `no_sync` is their own.
        wrappers = (*distributed.DATA_PARALLEL_WRAPPERS, FSDP1_WRAPPER)

        for flow in program.flows:
            for event in flow.of_kind(METHOD, CALL):
                if event.kind == METHOD and event.method in _FSDP1_METHODS:
                    module, method = event.target, event.method
                    receiver = code(event, event.node.func.value)
                elif event.kind == CALL and event.args and event.args[0].ref and (static := _fsdp1_static_method(event.qname)):
                    module, method = event.args[0].ref, static
                    receiver = code(event, event.node.args[0].value)
                else:
                    continue
                # FSDP1's static methods look for FSDP1 units anywhere in the module given: one that holds
                # FSDP2 units (bd3lm's model, whose backbone is sharded) has none either.
                how = Managed.HOLDS_UNIT if method in _FSDP1_STATIC_METHODS else Managed.WITHIN
                shard = flow.sharding_of(module, event.index, fsdp=2, how=how)
                if shard is None or flow.isinstance_known(event, module, wrappers, (method,)):
                    # `if isinstance(model, DDP): model.no_sync()`, or `elif hasattr(model, "no_sync"):`
                    # (no FSDP2 module has the method): there, it is the wrapper's
                    continue
                if flow.isinstance_known(event, module, (FSDP2_MODULE,), FSDP2_METHODS) is False:
                    continue  # the `else` of `if hasattr(model, "set_requires_gradient_sync"):`: no FSDP2 module gets there
                fix = safe_where_sharded(no_sync_fix(event), shard, event) if method == "no_sync" else None
                advice = _FSDP1_METHODS[method].format(m=receiver)
                sharded = "is sharded" if flow.sharding_of(module, event.index, fsdp=2) is shard else "holds modules sharded"
                yield Finding(event.file, event.node,
                              f"`{method}` is FSDP1 API but `{receiver}` {sharded} with `fully_shard` "
                              f"(at {where(shard)}){via(event)}: {advice}", fix,
                              related=(at(shard, "sharded here"), *calls(flow, event)))
            yield from self._sync_never_restored(flow)

    @staticmethod
    def _sync_never_restored(flow) -> Iterable[Finding]:
        import libcst as cst

        from fsdplint.model import METHOD
        from fsdplint.rulekit import at, calls, code, via

        def sets_sync(event) -> str | None:
            """'off', 'on' or None for a `set_requires_gradient_sync` call."""
            if event.kind != METHOD or event.method != "set_requires_gradient_sync" or not event.node.args:
                return None
            value = event.node.args[0].value
            return "off" if isinstance(value, cst.Name) and value.value == "False" else "on"

        for index, event in enumerate(flow.events):
            if sets_sync(event) != "off" or flow.sharding_of(event.target, index, fsdp=2) is None:
                continue
            for later in flow.events[index + 1:]:
                if sets_sync(later) == "on" and later.target == event.target:
                    break
                if later.kind == METHOD and later.method == "step" and later.target in flow.optimizer_bindings:
                    receiver = code(event, event.node.func.value)
                    yield Finding(event.file, event.node,
                                  f"gradient sync of `{receiver}` is turned off and not turned back on before "
                                  f"`{code(later, later.node.func.value)}.step()`{via(event)}: those gradients are never reduced; "
                                  f"call `{receiver}.set_requires_gradient_sync(True)` before the last backward",
                                  related=(at(later, "step here"), *calls(flow, event)))
                    break
