from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity

_WRITERS = frozenset({"torch.save", "safetensors.torch.save_file"})
_SETTERS = frozenset({"set_model_state_dict", "set_optimizer_state_dict", "set_state_dict"})


class RankZeroOnlyStateUsedEverywhere(Rule):
    """
    ## What it does
    Finds a state dict gathered with `StateDictOptions(full_state_dict=True, cpu_offload=True)`
    and then written or loaded on every rank, with no rank guard: `torch.save(sd, path)`,
    `save_pretrained(path, state_dict=sd)`, `safetensors.torch.save_file(sd, path)`,
    `other.load_state_dict(sd)`, or `set_model_state_dict(..., sd)` without `broadcast_from_rank0`.

    ## Why is this bad?
    With `cpu_offload=True` the full state dict is kept on rank 0 only: every other rank gets `{}`.
    Written on every rank to one path, the empty files race the good one and the last writer wins;
    loaded on every rank, the other ranks fail with `Missing key(s) in state_dict` (or a
    `KeyError` where a key is read).

    ## Example
    ```python
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    torch.save(state, "model.pt")
    ```

    ## Use instead
    ```python
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if torch.distributed.get_rank() == 0:
        torch.save(state, "model.pt")
    ```
    To use the full state dict on every rank, gather it without `cpu_offload=True`.

    ## Fix safety
    No fix: whether the use belongs on rank 0 or the gather must keep the state on every rank is a
    choice about the code.

    ## References
    - [StateDictOptions](https://pytorch.org/docs/stable/distributed.checkpoint.html#torch.distributed.checkpoint.state_dict.StateDictOptions)
    """

    code = "FSDP204"
    name = "rank0-only-state-used-on-every-rank"
    summary = "A state dict that only rank 0 holds (`cpu_offload=True`) written or loaded on every rank"
    severity = Severity.ERROR
    fix_availability = FixAvailability.NONE
    trigger_tokens = ("get_model_state_dict", "get_optimizer_state_dict", "get_state_dict")

    def check(self, program) -> Iterable[Finding]:
        from fsdplint import distributed
        from fsdplint.model import CALL
        from fsdplint.rulekit import at, calls, code, where

        for flow in program.flows:
            if not flow.is_entry:  # a caller's rank guard is only known in the caller's flow
                continue
            for gather in flow.of_kind(CALL):
                if (gather.binding is None or gather.rank_guards or not distributed.is_state_dict_helper(gather.qname or "")
                        or not {"full_state_dict", "cpu_offload"} <= flow.state_dict_options(gather) or not self._ranks_shown(flow, gather)):
                    continue
                for use in flow.events[gather.index + 1:]:
                    if use.binding is not None and use.binding.root == gather.binding.root:
                        break  # the name now holds something else
                    action = None if use.rank_guards else self._use(flow, use, gather.binding)
                    if action:
                        yield Finding(use.file, use.node,
                                      f"`{code(gather, gather.node.args[0].value) if gather.node.args else 'the state dict'}`'s full state "
                                      f"dict (gathered at {where(gather)} with `cpu_offload=True`) is on rank 0 only, the other ranks "
                                      f"hold `{{}}`, and this {action} it on every rank; do it under `if rank == 0:`, or gather "
                                      f"without `cpu_offload=True`", related=(at(gather, "gathered here"), *calls(flow, use)))

    @staticmethod
    def _ranks_shown(flow, gather) -> bool:
        """The program shows more than one rank where the state dict is gathered: the module is sharded
        or wrapped, or tested to be an FSDP module, a process group was started before, or the flow
        reads this process's rank outside a test module. A model built and gathered in one process
        (OLMo-core's conversion test, under pytest) has no other rank."""
        from fsdplint import distributed
        from fsdplint.model import CALL, FSDP1_WRAPPER

        module = gather.args[0].ref if gather.args else None
        if module is not None and (flow.sharding_of(module, gather.index, fsdp=None) or flow.isinstance_known(gather, module, (FSDP1_WRAPPER, "torch.distributed.fsdp.FSDPModule"))):
            return True
        if any(event.kind == CALL and event.qname in distributed.PROCESS_GROUP_STARTERS for event in flow.events[:gather.index]):
            return True
        # Reading the rank says the script runs distributed; a test module's helpers read it in one process too.
        return flow.reads_rank and not gather.file.is_test

    @staticmethod
    def _use(flow, event, state) -> str | None:
        """`writes` or `loads` when `event` uses the state dict bound to `state`, else None."""
        from fsdplint.model import CALL, METHOD

        def holds(value) -> bool:
            return value is not None and value.ref is not None and value.ref.is_within(state)

        if event.kind == CALL and event.qname in _WRITERS and event.args and holds(event.args[0]):
            return "writes"
        if event.kind == METHOD and event.method == "save_pretrained" and holds(event.kwargs.get("state_dict")):
            return "writes"
        if event.kind == METHOD and event.method == "load_state_dict" and event.args and holds(event.args[0]):
            return "loads"
        if (event.kind == CALL and (event.qname or "").rsplit(".", 1)[-1] in _SETTERS and any(holds(arg) for arg in event.args)
                and "broadcast_from_rank0" not in flow.state_dict_options(event)):
            return "loads"
        return None
