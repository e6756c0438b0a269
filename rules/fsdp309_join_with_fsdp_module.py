from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity

# `Join`, as torch exports it.
_JOIN = frozenset({"torch.distributed.algorithms.join.Join", "torch.distributed.algorithms.Join"})


class JoinWithFsdpModule(Rule):
    """
    ## What it does
    Finds `Join([...])` (`torch.distributed.algorithms.join.Join`, the context manager for uneven
    inputs) given a module sharded with `fully_shard` or wrapped in `FullyShardedDataParallel`.

    ## Why is this bad?
    `Join` works only with `Joinable` objects: `DistributedDataParallel` and
    `ZeroRedundancyOptimizer` implement `join_hook()`, which shadows the collectives of a rank that
    ran out of inputs. FSDP modules, of either version, implement none, so `Join` fails as soon as
    it is built, on every rank (torch 2.13, CPU/gloo, two ranks):

    - `fully_shard`: `AttributeError: 'FSDPToyModel' object has no attribute 'join_hook'`
    - `FullyShardedDataParallel`: `AttributeError: 'FullyShardedDataParallel' object has no attribute 'join_hook'`

    There is no FSDP equivalent of `Join`: a rank that stops early leaves the others waiting in the
    all-gathers and reduce-scatters of the next step.

    ## Example
    ```python
    fully_shard(model)
    with Join([model]):
        for batch in rank_local_batches:
            model(batch).sum().backward()
    ```

    ## Use instead
    ```python
    fully_shard(model)
    sampler = DistributedSampler(dataset)  # pads: every rank gets the same number of batches
    for batch in DataLoader(dataset, sampler=sampler, batch_size=8):
        model(batch).sum().backward()
    ```

    ## Fix safety
    No fix: the remedy is to even the inputs (a `DistributedSampler`, which pads by default;
    `drop_last=True`; a number of steps agreed by all ranks), which depends on how the data is
    split. Removing `Join` alone would turn the error into a hang on the last step.

    ## References
    - [Join (torch.distributed.algorithms)](https://pytorch.org/docs/stable/distributed.algorithms.join.html)
    - [Distributed training with uneven inputs using the Join context manager](https://pytorch.org/tutorials/advanced/generic_join.html)
    """

    code = "FSDP309"
    name = "join-with-fsdp-module"
    summary = "`Join` given an FSDP module, which is not Joinable"
    severity = Severity.ERROR
    fix_availability = FixAvailability.NONE
    trigger_tokens = ("Join",)

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.model import CALL, SHARD
        from fsdplint.rulekit import at, calls, code, via, where

        for flow in program.flows:
            for event in flow.of_kind(CALL):
                if event.qname not in _JOIN:
                    continue
                joinables = event.argument(0, "joinables")
                if joinables is None or joinables[1].elements is None:
                    continue
                for node, value in zip(_element_nodes(joinables[0], len(joinables[1].elements)), joinables[1].elements):
                    sharded = _sharded(flow, event, value)
                    if sharded is None:
                        continue
                    api = "fully_shard" if sharded.kind == SHARD else "FullyShardedDataParallel"
                    held = ".".join((value.ref.name, *value.ref.path)).replace(".[]", "[...]")
                    shown = f"`{code(event, node)}`" if node is not None else f"`{held}` (in `{code(event, joinables[0])}`)"
                    yield Finding(event.file, event.node,
                                  f"`Join` is given {shown}, a module {'sharded with' if sharded.kind == SHARD else 'wrapped in'} "
                                  f"`{api}` (at {where(sharded)}){via(event)}: FSDP modules are not Joinable (`AttributeError: ... "
                                  f"no attribute 'join_hook'`); even the inputs across ranks instead (a `DistributedSampler`, "
                                  f"`drop_last=True`)",
                                  related=(at(sharded, "sharded here" if sharded.kind == SHARD else "wrapped here"), *calls(flow, event)))
                    break


def _element_nodes(node, count: int):
    """The element nodes of a list or tuple literal (`Join([model, optimizer])`); Nones for a variable
    holding one, whose elements are written elsewhere."""
    import libcst as cst

    if isinstance(node, (cst.List, cst.Tuple)):
        return [element.value for element in node.elements]
    return [None] * count


def _sharded(flow, event, value):
    """The shard or wrap event that made `value` an FSDP module: the module itself is its target (not
    a sub-module of one), and nothing built the value again after it (`model = DDP(model)`)."""
    if value.ref is None:
        return None
    sharded = flow.sharding_of(value.ref, event.index, fsdp=None)
    # Sharded on every path to `Join` (not in one arm of `if fsdp: ... else: model = DDP(model)`).
    if sharded is None or not sharded.on_every_path_to(event) or not any(value.ref.is_within(target) and len(value.ref.path) == len(target.path) for target in sharded.targets):
        return None
    made = flow.origin(value, event.index)
    if made is not None and made is not sharded and made.index > sharded.index:
        return None
    return sharded
