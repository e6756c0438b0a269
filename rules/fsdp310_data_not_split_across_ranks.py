from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity

_SEEDING = ("seed",)  # a call whose name says it seeds random numbers: `torch.manual_seed`, `set_seed`, `seed_everything`
_OTHER_GENERATORS = ("random.", "numpy.")  # their seeds leave torch's, which a DataLoader shuffles with, as they were


class DataNotSplitAcrossRanks(Rule):
    """
    ## What it does
    Finds a `DataLoader` with no `sampler` (and no `batch_sampler`) over a map-style dataset, in a
    flow that trains a model sharded with `fully_shard`, wrapped in `FullyShardedDataParallel` or
    in `DistributedDataParallel`: the loader is iterated by a loop that calls `backward()`, and
    nothing that depends on the rank reaches the dataset or the loader.

    ## Why is this bad?
    Every rank builds the same dataset and the same loader, so every rank iterates all of the data
    in the same batches (with `shuffle=True` too, where the ranks seed torch alike). Data parallelism
    then buys nothing: the gradients the ranks average are all the same, each epoch costs as much
    as on one rank, and the effective batch is one rank's. Nothing fails and nothing is printed
    (observed, torch 2.13, two ranks: both trained on all 32 samples, the same batches).

    The rule is silent where the split may happen out of its sight: the dataset, the loader or
    their constructors receive the rank or the world size in any way (arguments, attributes, a
    method of the dataset's class that reads the rank), the dataset is iterable-style or of a class
    fsdplint does not know, a framework prepares the loader (`accelerator.prepare(loader)`, a
    trainer's `fit`), a shuffling loader's random numbers are not seeded alike on every rank (seeded
    from the rank, or never seeded: each process then starts from a seed of its own), or the loader
    is only evaluated (a loop with no `backward()`, where every rank evaluating everything is
    redundant, not wrong), the training runs in a test module (`test_*.py`), where parity tests
    feed every rank the same batches on purpose, or the script starts a process group of one
    process (`init_process_group(..., world_size=1)`), where no other rank trains, or the model is
    sharded or wrapped only where the loader is not built (`if ddp_on: model = DDP(model)` beside
    an `else:` that builds it). It is a warning: a dataset may be split by means it cannot see.

    ## Example
    ```python
    loader = DataLoader(dataset, batch_size=8, shuffle=True)
    for x, y in loader:
        loss_fn(model(x), y).backward()
    ```

    ## Use instead
    ```python
    sampler = DistributedSampler(dataset)  # shuffles; call sampler.set_epoch(epoch) each epoch
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    for x, y in loader:
        loss_fn(model(x), y).backward()
    ```

    ## Fix safety
    No fix: a sampler changes the batches, the number of steps per epoch and the meaning of
    `batch_size`, and whether `shuffle=True` moves into the sampler is a choice.

    ## References
    - [DistributedSampler](https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler)
    - [Getting started with DistributedDataParallel](https://pytorch.org/tutorials/intermediate/ddp_tutorial.html)
    """

    code = "FSDP310"
    name = "data-not-split-across-ranks"
    summary = "A DataLoader with no sampler feeds a sharded or data-parallel model: every rank trains on the same batches"
    severity = Severity.WARNING
    fix_availability = FixAvailability.NONE
    trigger_tokens = ("DataLoader",)

    def check(self, program) -> Iterable[Finding]:
        from fsdplint import distributed
        from fsdplint.model import CALL

        for flow in program.flows:
            if flow.file.is_test:
                continue  # a parity test feeds every rank the same batches on purpose (DeepSpeed's DDP comparisons)
            for loader in flow.of_kind(CALL):
                if loader.qname in distributed.DATA_LOADERS:
                    finding = self._finding(program, flow, loader)
                    if finding is not None:
                        yield finding

    def _finding(self, program, flow, loader) -> Finding | None:
        from fsdplint.model import CALL
        from fsdplint.rulekit import at, handed_over, is_backward, rebound, starts_one_process, where

        if any(arg.star for arg in loader.node.args) or loader.argument(3, "sampler") or loader.argument(4, "batch_sampler") \
                or "generator" in loader.kwargs or _per_process(loader):
            return None
        given = loader.argument(0, "dataset")
        if given is None:
            return None
        made = flow.origin(given[1], loader.index)
        kind = _map_style(program, made) if made is not None else None
        if kind is None or _per_process(made):
            return None
        loops = [loop for loop in flow.loops if loop.first > loader.index and loop.iterable is not None and _iterates_loader(flow, loop.iterable, loader)]
        training = next((loop for loop in loops if any(is_backward(event) for event in loop.body(flow))), None)
        if training is None:
            return None
        model = _distributed_model(flow, training, loader)
        if model is None or any(starts_one_process(flow, event) for event in flow.of_kind(CALL)):
            return None  # not distributed, or in a group of one process: no other rank trains on the same batches
        roots = {ref.root for ref in (made.binding, loader.binding, given[1].ref) if ref is not None}
        between = flow.events[made.index + 1:training.end]
        if handed_over(between, roots) or rebound(between, loader) or any(_configures(event, roots) for event in between):
            return None
        if _shuffles(loader) and not _seeded_alike(flow, training.first):
            return None
        line = made.file.position(made.node).start.line
        return Finding(loader.file, loader.node,
                       f"this `DataLoader` has no sampler, and nothing of the rank reaches its dataset (`{kind}`, line {line}): "
                       f"every rank trains on all of it in the same batches (the model is {model[1]} at {where(model[0])}); "
                       f"pass `sampler=DistributedSampler(dataset)`",
                       related=(at(made, "dataset built here"), at(model[0], f"{model[1]} here")))


def _iterates_loader(flow, value, loader) -> bool:
    from fsdplint.rulekit import iterates

    return value.event is loader or (loader.binding is not None and iterates(flow, value, loader.binding))


def _per_process(event) -> bool:
    """A call given the rank, a value computed from it, or the world size."""
    return any(value.rank is not None or value.rank_derived or value.world_size or value.rank_test
               for value in (*event.args, *event.kwargs.values()))


def _configures(event, roots: set[str]) -> bool:
    """An attribute of the dataset or loader assigned (`dataset.rank = rank`), or a method of it given
    something of the rank (`dataset.set_rank(rank)`)."""
    from fsdplint.model import ASSIGN, METHOD

    # An element of the loader (`batch.to(device)`) is a batch, not the loader.
    if not any(target.root in roots and target.path[:1] != ("[]",) for target in event.targets):
        return False
    return event.kind == ASSIGN or event.kind == METHOD and _per_process(event)


def _map_style(program, made) -> str | None:
    """The name of the dataset's class when it is known to be map-style and to read no rank: torch's
    `TensorDataset`, a torchvision dataset, or a class of the run derived from `Dataset` (not
    `IterableDataset`) none of whose methods reads the rank."""
    import libcst as cst

    from fsdplint import distributed
    from fsdplint.model import CALL, CALL_VALUE

    if made.kind == CALL and made.qname in distributed.MAP_DATASETS:
        return made.qname.rsplit(".", 1)[-1]
    if made.kind == CALL and (made.qname or "").startswith("torchvision.datasets.") and made.qname.rsplit(".", 1)[-1][:1].isupper():
        return made.qname.rsplit(".", 1)[-1]
    if made.kind not in (CALL, CALL_VALUE) or type(made.node) is not cst.Call:
        return None
    found = program.class_of(made.file, made.node.func)
    if found is None or not _map_style_class(program, found[0], found[0].classes[found[1]], depth=0):
        return None
    return found[0].classes[found[1]].name.value


def _map_style_class(program, file, node, depth: int) -> bool:
    from fsdplint import distributed

    if depth > 4 or not node.bases:
        return False
    for function in file.functions.values():
        if function.class_name == node.name.value and function.node in _methods(node):
            flow = program.flow_of(function)
            if flow.exhausted or flow.reads_rank:
                return False
    verdicts = []
    for base in node.bases:
        qualified = file.qualify(base.value)
        if qualified in distributed.ITERABLE_DATASET_BASES:
            return False
        if qualified in distributed.MAP_DATASET_BASES:
            verdicts.append(True)
            continue
        parent = program.class_of(file, base.value)
        if parent is None:
            return False  # a base fsdplint does not know may split the data, or iterate
        verdicts.append(_map_style_class(program, parent[0], parent[0].classes[parent[1]], depth=depth + 1))
    return any(verdicts) and all(verdicts)


def _methods(node) -> list:
    import libcst as cst

    from fsdplint.model.syntax import statements_of

    return [statement for statement in statements_of(node.body) if type(statement) is cst.FunctionDef]


def _distributed_model(flow, loop, loader):
    """The event that shards or wraps a model for data parallelism in this flow, before or in the
    training loop, where the loader is built too (ArgonneAI's `if DDP_ON:` wrap, whose `else:` builds
    the loader with no sampler, is not), with what it does."""
    from fsdplint import distributed
    from fsdplint.model import CALL, SHARD, WRAP

    for event in flow.events[:loop.end]:
        if event.kind == SHARD:
            what = "sharded with `fully_shard`"
        elif event.kind == WRAP:
            what = "wrapped in `FullyShardedDataParallel`"
        elif event.kind == CALL and event.qname in distributed.DATA_PARALLEL_WRAPPERS:
            what = "wrapped in `DistributedDataParallel`"
        else:
            continue
        if not event.excludes(loader):  # asked of the wraps only, not of every event before the loop
            return event, what
    return None


def _shuffles(loader) -> bool:
    """`shuffle=` given and not the literal `False`."""
    import libcst as cst

    given = loader.argument(2, "shuffle")
    return given is not None and not (type(given[0]) is cst.Name and given[0].value == "False")


def _seeded_alike(flow, before: int) -> bool:
    """Torch's random numbers are seeded before the loop, from nothing of the rank (`torch.manual_seed(42)`,
    `set_seed(args.seed)`): every rank shuffles alike. Never seeded, each process's generator starts from
    a seed of its own; seeded from the rank (`seed + rank`), they differ: the ranks shuffle differently."""
    seeded = False
    for event in flow.events[:before]:
        name = (event.method or event.qname or "").rsplit(".", 1)[-1].lower()
        if not any(word in name for word in _SEEDING) or (event.qname or "").startswith(_OTHER_GENERATORS):
            continue
        if any(value.rank is not None or value.rank_derived for value in (*event.args, *event.kwargs.values())) \
                or "device_specific" in event.keywords_set_true():  # accelerate's `set_seed(seed, device_specific=True)` adds the rank
            return False
        seeded = True
    return seeded
