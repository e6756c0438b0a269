from __future__ import annotations

import re
from typing import Iterable

from fsdplint import distributed
from fsdplint.rule import Finding, FixAvailability, Rule, Severity


class CollectiveOnSomeRanks(Rule):
    """
    ## What it does
    Finds a collective reached under a rank guard: `if rank == 0:`, `if dist.get_rank() == 0:`,
    `if is_main_process:`, `if self.global_rank == 0:`, `if fabric.is_global_zero:`, a name assigned
    from such a test, the rest of a function after `if rank != 0: return`, a test of whether a value
    is None that a function returns only on some ranks (`sd = gathered(model)`, where `gathered`
    returns the state dict on rank 0 and None on the others, then `if sd is None: return`), or a
    function decorated `@rank_zero_only`. The collective may be in the guarded block itself or in a function it calls,
    at any depth among the checked files; the message names the chain of calls. A comparison of the
    rank with a value that also differs between ranks (`if local_rank != self.local_shard_id:` where
    the constructor set `self.local_shard_id = local_rank % local_world_size`) is no guard: which
    ranks pass it is not known; nor is a comparison of the rank with whose turn it is in a loop
    (`if i % world_size != rank: continue`), which every rank passes in its own turns. Where the other
    ranks reach the same collective instead, each rank joins one, and there is no finding: in the
    `else` of the guard, under the opposite test, or past the guarded block when the guarded
    collective's block returns (`if is_rank0(): ... except StopIteration: broadcast(end); return
    None`, then `broadcast(batch)` on every rank). Nor where the process group itself is started past
    the guard (`if local_rank != 0: return`, then `init_process_group(world_size=num_nodes,
    rank=node_rank)`), or a forward's module is sharded on a device mesh built past it
    (`init_device_mesh("cuda", (world_size // 2,))` under `if rank < world_size // 2:`): its members are
    the ranks the guard keeps, and every one of them reaches the collective. Nor where the ranks it
    keeps out reach the same collective in a `while` loop on a path apart from it (a leader broadcasting from
    its callbacks to workers that receive in `while True:`): they may join each of its calls. A rank
    test the tests around it decide (`if self.rank == 0: raise` in a method called only in the `else`
    of `if node.rank == 0:`) keeps no rank out there. A collective that runs only where
    `dist.is_initialized()` is false (its `else`, also through a name or a constructor's flag that holds
    it) has no other process to wait for.

    Collectives are the `torch.distributed` ones (`barrier`, `all_reduce`, `broadcast`, ...),
    `dcp.save`/`dcp.load`/`dcp.async_save`, the `get_`/`set_` state-dict helpers with
    `full_state_dict=True` or `broadcast_from_rank0=True`, `DTensor.full_tensor()`, FSDP1's
    `summon_full_params`, `full_optim_state_dict` and the wrapped module's `state_dict()` and
    `load_state_dict()` under FULL_STATE_DICT (its default; loading unshards the parameters first, an
    all-gather; not the module inside the wrap, `model.module`, whose nested units
    the wrap's policy may not have made), and `unshard()` or a forward of a sharded module.

    ## Why is this bad?
    Every rank of the process group must enter a collective. The ranks the guard keeps out never
    do, so the ranks inside wait for them until the process-group timeout (gloo:
    `Timed out waiting ... for recv operation to complete`; NCCL: the watchdog kills the job after
    10 minutes by default), or the other ranks reach a different collective and the two mismatch.
    Gathering a full state dict "only on rank 0, since only rank 0 writes the file" is the usual way
    in: the gather is a collective even though the write is not.

    ## Example
    ```python
    def save_checkpoint(model, path):
        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        torch.save(state, path)

    if dist.get_rank() == 0:
        save_checkpoint(model, path)  # rank 0 waits forever in the all-gather
    ```

    ## Use instead
    ```python
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        torch.save(state, path)
    ```

    ## Fix safety
    No fix: which part of the guarded code must run on every rank is a choice about the code.

    ## References
    - [Collective communication](https://pytorch.org/docs/stable/distributed.html#collective-functions)
    - [Distributed state dict](https://pytorch.org/docs/stable/distributed.checkpoint.html)
    """

    code = "FSDP203"
    name = "collective-on-some-ranks"
    summary = "A collective reached under a rank guard: the other ranks never join and it hangs"
    severity = Severity.ERROR
    fix_availability = FixAvailability.NONE
    trigger_tokens = distributed.COLLECTIVE_TOKENS

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.rulekit import over_a_group

        for flow in program.flows:
            # A collective over a group of its own may be meant for the guarded ranks only.
            every = [(event, name) for event in flow.events if (name := flow.collective(event)) and not over_a_group(event)]
            collectives = [(event, name) for event, name in every if event.rank_guards]
            # Where the other ranks reach a collective too, each rank reaches one: `if rank == 0:
            # broadcast(x) else: broadcast(y)`, or `if not is_main: barrier()` ... `if is_main: barrier()`,
            # with the same other parts of the test (`if world_size > 1 and rank != 0:` ... `and rank == 0`).
            reaching = {guard.conjuncts() for event, _ in collectives for guard in event.rank_guards}
            for event, name in collectives:
                guard = next((g for g in reversed(event.rank_guards) if not _complemented(g, reaching)
                              and not any(_in_other_branch(other, g) or _reached_instead(other, other_name, event, name, g)
                                          or _joined_in_a_loop(flow, other, other_name, event, name) for other, other_name in every)
                              and not _other_arm_calls_unseen_code(flow, event, g) and not flow.group_started_past(g, event)), None)
                if guard is not None:
                    yield self._finding(flow, event, name, guard)

    @staticmethod
    def _finding(flow, event, name: str, guard) -> Finding:
        from fsdplint.model import GUARD_AFTER_EXIT, GUARD_DECORATED
        from fsdplint.rulekit import at, calls

        depth = len(guard.chain)
        direct = len(event.chain) == depth
        node = event.node if direct else event.call_sites[depth - 1]
        line = guard.file.position(guard.node).start.line
        where = {GUARD_AFTER_EXIT: f"after the other ranks leave at `{guard.code()}` (line {line})",
                 GUARD_DECORATED: f"in a function decorated `{guard.code()}` (line {line})"}.get(guard.branch, f"under `{guard.code()}`")
        what = "a forward of a sharded module" if name == "forward" else f"the collective `{name}`"
        call = guard.file.code(node).strip()
        if len(call) > 60:
            call = call[:57] + "..."
        reached = f"is {what}" if direct else f"reaches {what} ({' → '.join(event.chain[depth:] + (name,))})"
        # A full state dict is loaded on every rank (each reading the file); one gathered to be saved
        # keeps its write on rank 0; any other collective (a barrier past `if rank == 0: raise ...`, a
        # checkpoint every rank writes its part of) has no rank-0 file to name.
        remedy = "call it on every rank, each loading the file" if name == "load_state_dict" else \
            "call it on every rank and keep only the rank-0 work (the file write) under the guard" if _GATHERS_TO_SAVE.search(name) else \
            "call it on every rank and keep only the rank-0 work under the guard"
        return Finding(guard.file, node,
                       f"`{call}` {where} {reached} on some ranks only: the other ranks never join and it hangs; {remedy}",
                       related=() if direct else (at(event, f"`{name}` here"), *calls(flow, event, below=node)))


# Collectives that gather what rank 0 then writes: state dicts (`state_dict`, `get_model_state_dict`,
# `full_optim_state_dict`), `full_tensor`, `summon_full_params`.
_GATHERS_TO_SAVE = re.compile(r"state_dict|full_tensor|summon_full_params")


def _complemented(guard, reaching: set[frozenset[tuple[str, bool]]]) -> bool:
    """Some collective's guard knows what this one knows with one part the other way round."""
    parts = guard.conjuncts()
    return any((parts - {part}) | {(part[0], not part[1])} in reaching for part in parts)


def _other_arm_calls_unseen_code(flow, event, guard) -> bool:
    """The other arm of the guard's `if` (its `else` or `elif`s, or the block a guard's `return` leaves),
    or code under the opposite test, calls code the model cannot see into: the other ranks may reach a
    collective there (NeMo's `elif rank > 0: model.generate_other_ranks()`, a method of a library's
    class, follows rank 0's broadcasts; and rank 0 hands the model to a library's server, whose
    callbacks broadcast to the ranks in `generate_other_ranks()`). Torch's functions, builtins,
    reporting (`logger.info`) and common methods are seen."""
    from fsdplint import distributed
    from fsdplint.model import CALL, CALL_VALUE, METHOD
    from fsdplint.model.events import arms_apart
    from fsdplint.model.names import BUILTINS

    arm = event.arm_at(guard.node)
    test, holds = guard.condition()

    def unseen(other) -> bool:
        if flow.collective(other):
            return False  # a collective the model knows
        if other.kind == METHOD:
            return not distributed.runs_known_code(None, other.method)
        if other.kind == CALL:
            qname = other.qname
            return not (qname and (distributed.is_torch_name(qname) or qname in BUILTINS or distributed.runs_known_code(qname, None)))
        return other.kind == CALL_VALUE

    def elsewhere(other) -> bool:
        """In another arm of the guard's `if`, or under the opposite test (`if rank == 0: serve() elif rank > 0: ...`)."""
        return (arm is not None and any(key == arm[0] and arms_apart(number, arm[1]) for key, number in other.arms)
                or any(their.condition() == (test, not holds) for their in other.rank_guards))

    return any(unseen(other) for other in flow.events if other.rank_guards or other.arms if elsewhere(other))


def _reached_instead(other, other_name: str, event, name: str, guard) -> bool:
    """`other` is the same collective on a path that excludes `event`'s, outside the guard: the ranks
    the guard keeps out reach it instead (RLLaVA's `dist_batch`: rank 0 broadcasts the end of the
    data and returns under `if is_rank0():`, every rank reaches the broadcast after it otherwise)."""
    if other_name != name or not other.runs_where_returned(event):
        return False
    test = guard.condition()  # written out from the code: asked only of a collective that may match
    return not any(theirs.condition() == test for theirs in other.rank_guards)


def _joined_in_a_loop(flow, other, other_name: str, event, name: str) -> bool:
    """`other` is the same collective, in a `while` loop apart from `event`, on a path that excludes it:
    the ranks that run it instead may join each of `event`'s calls, however many there are, until what
    they receive ends the loop (LightX2V's workers: `while True: broadcast_object_list(objects, src=0)`
    on the ranks other than 0, which receive rank 0's broadcasts from its callbacks, the last one
    `stop` from its teardown). A `for` loop runs as many times as what it iterates holds."""
    import libcst as cst

    return other_name == name and other.excludes(event) and any(
        type(loop.node) is cst.While and loop.first <= other.index < loop.end and not loop.first <= event.index < loop.end
        for loop in flow.loops)


def _in_other_branch(event, guard) -> bool:
    """Whether `event` runs in the other branch of the `if` that `guard` is a branch of. That branch
    need not be a rank guard itself: under `if is_main and sender:`, the else runs on the other
    ranks (and on every rank when there is no sender)."""
    import libcst as cst

    from fsdplint.model import GUARD_BODY, GUARD_ELSE

    # An `elif` is a further condition: its branch need not run on the other ranks.
    if guard.branch not in (GUARD_BODY, GUARD_ELSE) or type(guard.node.orelse) is not cst.Else:
        return False
    return event.branch_of(guard.node) is (guard.branch == GUARD_ELSE)
