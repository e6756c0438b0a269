"""What an FSDP1 wrap shards, read from its sharding strategy: torch knowledge beside the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fsdplint.model.conditions import can_hold

if TYPE_CHECKING:
    from fsdplint.model.events import Event
    from fsdplint.model.values import Ref

# FSDP1 strategies that shard parameters (and so the optimizer's state) across the ranks.
_SHARDING_STRATEGIES = frozenset({"FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"})
_NO_SHARD = "ShardingStrategy.NO_SHARD"
_FULL_STATE_DICT = "StateDictType.FULL_STATE_DICT"


def shards_nothing(wrap: Event, at: Event | None = None) -> bool:
    """FSDP1 with `sharding_strategy=ShardingStrategy.NO_SHARD`: whole parameters and gradients on every
    rank, as DDP keeps them; nothing is all-gathered. With `at`, also a strategy from a variable that the
    tests around `at`, with those around the wrap, say is NO_SHARD there (SLAM-LLM: `sharding_strategy=
    fsdp_config.sharding_strategy`, and `elif fsdp_config.sharding_strategy == ShardingStrategy.NO_SHARD:
    if rank == 0: save(model)`; carbonscott/maxie: `clip_grad_norm_(model.parameters()) if (not uses_dist)
    or sharding_strategy == ShardingStrategy.NO_SHARD else model.clip_grad_norm_()`, where the wrap runs
    only `if uses_dist:`)."""
    strategy = wrap.argument(2, "sharding_strategy")  # FullyShardedDataParallel(module, process_group, sharding_strategy, ...)
    if strategy is None:
        return False
    if (wrap.file.qualify(strategy[0]) or "").endswith(_NO_SHARD):
        return True
    chosen = strategy[1].ref
    if at is None or chosen is None:
        return False
    facts = at.facts + wrap.facts
    return any(not can_hold(facts + ((test, False),)) for test in _tests_of_no_shard(at.facts, chosen))


def _tests_of_no_shard(facts, chosen: Ref) -> list[tuple]:
    """The tests in `facts` that `chosen` is NO_SHARD (`("eq", chosen, "...ShardingStrategy.NO_SHARD")`),
    however deep in an `and`, `or` or `not`."""
    found, pending = [], [formula for formula, _ in facts]
    while pending:
        formula = pending.pop()
        if type(formula) is not tuple:
            continue
        if formula[0] == "eq" and formula[1] == chosen and formula[2].endswith(_NO_SHARD):
            found.append(formula)
        elif formula[0] in ("not", "and", "or"):
            pending.extend(formula[1:])
    return found


def certainly_shards(wrap: Event) -> bool:
    """FSDP1 that shards the parameters: its default (FULL_SHARD) or a sharding strategy named in the
    call; not where a variable or a `*`/`**` argument may choose NO_SHARD."""
    if any(arg.star for arg in wrap.node.args):
        return False
    strategy = wrap.argument(2, "sharding_strategy")
    return strategy is None or (wrap.file.qualify(strategy[0]) or "").rsplit(".", 1)[-1] in _SHARDING_STRATEGIES


def chooses_full_state_dict(chooser: Event) -> bool:
    """`FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT)` (or `set_state_dict_type`): the
    state dict type it names is the full one; not one a variable or a `*`/`**` argument chooses."""
    chosen = chooser.argument(1, "state_dict_type")  # (module, state_dict_type, state_dict_config, ...)
    return chosen is not None and (chooser.file.qualify(chosen[0]) or "").endswith(_FULL_STATE_DICT)
