from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity


class Rank0LoadWithoutSyncModuleStates(Rule):
    """
    ## What it does
    Finds weights loaded on rank 0 only (`if rank == 0: model.load_state_dict(...)`, or the model
    built with `from_pretrained` there) before the model is wrapped in FSDP1's
    `FullyShardedDataParallel` without `sync_module_states=True`.

    ## Why is this bad?
    `FullyShardedDataParallel` shards the module each rank hands it: rank 0 keeps its shard of the
    loaded weights and every other rank keeps its shard of its own initialization. The model that
    trains is a mix: observed, on 2 ranks, 2 of 8 parameters equal to the checkpoint's (33% of
    them in another run). Nothing fails. `sync_module_states=True` broadcasts rank 0's parameters
    and buffers to all ranks before sharding.

    ## Example
    ```python
    model = Transformer()
    if rank == 0:
        model.load_state_dict(torch.load("checkpoint.pt"))
    model = FSDP(model, auto_wrap_policy=policy, device_id=local_rank)
    ```

    ## Use instead
    ```python
    model = FSDP(model, auto_wrap_policy=policy, device_id=local_rank, sync_module_states=True)
    ```
    or load the checkpoint on every rank.

    ## Fix safety
    No fix: `sync_module_states=True` needs the module on the GPU or a CUDA `device_id` (with
    parameters on the CPU it raises `ValueError: The module has CPU parameters or buffers when
    sync_module_states=True`), and loading on every rank costs every rank the memory of the full
    checkpoint; which one fits is the user's choice.

    ## References
    - [FullyShardedDataParallel: sync_module_states](https://pytorch.org/docs/stable/fsdp.html)
    """

    code = "FSDP404"
    name = "rank0-load-without-sync-module-states"
    summary = "Weights loaded on rank 0 only, then wrapped in FSDP1 without `sync_module_states=True`"
    severity = Severity.ERROR
    fix_availability = FixAvailability.NONE
    trigger_tokens = ("FullyShardedDataParallel",)

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.rulekit import at, calls, code, via, where

        for flow in program.flows:
            for wrap in flow.shard_events(fsdp=1):
                if wrap.target is None or wrap.rank_guards or any(arg.star == "**" for arg in wrap.node.args):
                    continue
                sync = wrap.kwargs.get("sync_module_states")
                if sync is not None and sync.constant != "False":
                    continue  # True, or decided at run time
                load = next((event for event in flow.events[:wrap.index] if self._loads_into(event, wrap.target)
                             and event.rank_guards and not event.excludes(wrap)), None)
                if load is None:
                    continue
                name = code(wrap, wrap.node.args[0].value) if wrap.node.args and wrap.node.args[0].keyword is None else "the model"
                yield Finding(wrap.file, wrap.node,
                              f"`{name}` gets its weights on rank 0 only (at {where(load)}) and is wrapped in "
                              f"`FullyShardedDataParallel` without `sync_module_states=True`{via(wrap)}: the other ranks shard "
                              f"their own initialization, so the model trains from a mix; pass `sync_module_states=True` "
                              f"(the module must be on the GPU or `device_id` set) or load on every rank",
                              related=(at(load, "loaded here"), *calls(flow, wrap)))

    @staticmethod
    def _loads_into(event, module) -> bool:
        """`module.load_state_dict(...)` (or a sub-module's), or `module = X.from_pretrained(...)`."""
        from fsdplint.model import CALL, METHOD

        if event.kind == METHOD and event.method == "load_state_dict":
            return event.target.overlaps(module)
        if event.kind in (CALL, METHOD) and (event.method or event.qname or "").endswith("from_pretrained"):
            return event.binding is not None and event.binding.root == module.root
        return False
