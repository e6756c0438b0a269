from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity


class SamplerEpochNotSet(Rule):
    """
    ## What it does
    Finds a `DistributedSampler` that shuffles (`shuffle=True`, its default) whose data loader is
    iterated in an epoch loop that never calls `sampler.set_epoch(...)` (or
    `loader.sampler.set_epoch(...)`), directly or in a function it calls.

    ## Why is this bad?
    `DistributedSampler` seeds its shuffle with `seed + epoch`, and its epoch stays 0 until
    `set_epoch` changes it: every epoch visits the samples in the same order, on every rank the
    same part of the data in the same batches. Nothing fails and nothing is printed (observed, torch
    2.13: the sample indices of epoch 1 equal those of epoch 0). Training still runs, but without
    the reshuffling between epochs it was written to have, which usually costs accuracy.

    A loader handed to code fsdplint does not follow (a trainer's method, a library's function)
    inside the epoch loop may have its epoch set there, and is not reported; neither is a sampler
    whose `shuffle` is not known to be `True` (a literal, its default, or a parameter the call passed
    it for), a loop that runs once (`range(1)`, also with the count passed by the call), nor a loader
    iterated under `torch.no_grad()` or `torch.inference_mode()` (an evaluation, whose batch order
    changes nothing), as a `with` or as the decorator of the function that iterates it.

    ## Example
    ```python
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    for epoch in range(epochs):
        for batch in loader:
            ...
    ```

    ## Use instead
    ```python
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            ...
    ```

    ## Fix safety
    Safe: the fix inserts `sampler.set_epoch(epoch)` as the first statement of the epoch loop,
    with the loop's own variable, as the `DistributedSampler` documentation shows. It is offered
    when the loop is `for <name> in range(...)` with a block body, in the function that builds the
    sampler or the loader, which names it (`sampler.set_epoch` or `loader.sampler.set_epoch`). Where
    the sampler is built on some paths only (`if distributed:`, else `None` or a `RandomSampler`,
    which has no `set_epoch`), the call is guarded: `if hasattr(sampler, "set_epoch"):`.

    ## References
    - [DistributedSampler](https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler)
    """

    code = "FSDP311"
    name = "sampler-epoch-not-set"
    summary = "A shuffling DistributedSampler iterated over several epochs without `set_epoch`: every epoch has the same order"
    severity = Severity.WARNING
    fix_availability = FixAvailability.SAFE
    trigger_tokens = ("DistributedSampler",)

    def check(self, program) -> Iterable[Finding]:
        from fsdplint import distributed
        from fsdplint.model import CALL

        for flow in program.flows:
            for sampler in flow.of_kind(CALL):
                if sampler.qname not in distributed.DISTRIBUTED_SAMPLERS or not _shuffles(sampler):
                    continue
                for loader in flow.of_kind(CALL):
                    given = loader.argument(3, "sampler") if loader.qname in distributed.DATA_LOADERS else None
                    if given is None or loader.binding is None or not (
                            given[1].event is sampler or sampler.binding is not None and given[1].ref is not None
                            and sampler.binding in flow.alternatives(given[1].ref)):
                        continue
                    finding = self._finding(flow, sampler, loader, given[1].ref)
                    if finding is not None:
                        yield finding

    def _finding(self, flow, sampler, loader, given) -> Finding | None:
        from fsdplint.rulekit import at, handed_over, iterates, rebound

        # An evaluation loop (`with torch.no_grad():`) trains on nothing: the order of its batches does not matter.
        passes = [loop for loop in flow.loops if loop.iterable is not None and iterates(flow, loop.iterable, loader.binding)
                  and loop.first > loader.index and loop.computes_gradients()]
        # ... and the variable the loader was given, where it holds the sampler on some paths only
        roots = {ref.root for ref in (sampler.binding, loader.binding, given) if ref is not None}
        for inner in passes:
            around = [loop for loop in flow.loops if inner.within(loop) and loop.first > max(sampler.index, loader.index) and not _once(loop)]
            if not around:
                continue
            epochs = min(around, key=lambda loop: loop.first)  # the outermost: it repeats the epochs
            body = epochs.body(flow)
            if any((event.method or (event.qname or "").rsplit(".", 1)[-1]) == "set_epoch" for event in body) or handed_over(body, roots) \
                    or rebound(flow.events[loader.index:inner.first], loader) or rebound(flow.events[sampler.index:inner.first], sampler):
                continue
            line = inner.file.position(inner.node).start.line
            line = f"line {line}" if inner.file is epochs.file else f"{inner.file.display}:{line}"
            return Finding(epochs.file, epochs.node.iter if hasattr(epochs.node, "iter") else epochs.node.test,
                           f"this epoch loop iterates the loader of a shuffling `DistributedSampler` (in the loop at {line}) "
                           f"and never calls `set_epoch`: every epoch visits the samples in the order of epoch 0; call "
                           f"`sampler.set_epoch(epoch)` first in the loop",
                           self._fix(flow, epochs, sampler, loader), related=(at(sampler, "sampler built here"),))
        return None

    @staticmethod
    def _fix(flow, epochs, sampler, loader):
        import libcst as cst

        from fsdplint.fixes import Fix, InsertBefore, parse_statements
        from fsdplint.model import Ref
        from fsdplint.rulekit import local_name

        node = epochs.node
        if type(node) is not cst.For or type(node.target) is not cst.Name or type(node.body) is not cst.IndentedBlock:
            return None
        made = epochs.iterable.event
        if made is None or made.qname != "range" or len(epochs.chain) != 1:
            return None
        def name_of(made):
            """The variable of `made`'s result in the loop's function."""
            return local_name(flow, made.binding) if made.binding is not None and len(made.chain) == 1 else None

        def bound_once(made) -> bool:
            return len(flow.bindings.get(Ref(made.binding.root), ())) == 1

        holders = [name for name in [name_of(sampler)] if name]
        holders += [f"{name}.sampler" for name in [name_of(loader)] if name and bound_once(loader)]
        if not holders:
            return None
        call = f"{holders[0]}.set_epoch({node.target.value})"
        statement = call + "\n"
        if sampler.binding is not None and (not sampler.on_every_path_to(loader) or not bound_once(sampler)):
            # The sampler is built on some paths only (`if distributed:`, else None or a `RandomSampler`,
            # which has no `set_epoch`): the call, only where the variable holds one that has it.
            statement = f'if hasattr({holders[0]}, "set_epoch"):\n    {call}\n'
        return Fix(f"Call `{call}` at the start of each epoch", safe=True,
                   operations=[InsertBefore(node.body.body[0], parse_statements(epochs.file, statement))])


def _shuffles(sampler) -> bool:
    """`shuffle` left at its default, or given `True` (a literal, or a parameter the call passed it for)."""

    given = sampler.argument(3, "shuffle")
    return given is None or given[1].constant == "True"


def _once(loop) -> bool:
    """`for _ in range(1)`, also with the count a parameter the call passed 1 for: one pass."""
    made = loop.iterable.event if loop.iterable is not None else None
    return made is not None and made.qname == "range" and len(made.args) == 1 and not made.kwargs and made.args[0].constant in ("0", "1")
