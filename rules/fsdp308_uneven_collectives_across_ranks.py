from __future__ import annotations

from typing import Iterable

from fsdplint import distributed
from fsdplint.rule import Finding, FixAvailability, Rule, Severity


class UnevenCollectivesAcrossRanks(Rule):
    """
    ## What it does
    Finds a `for` loop whose number of iterations depends on the rank and whose body reaches a
    collective: a forward of a sharded module (`fully_shard` or `FullyShardedDataParallel`), a
    `torch.distributed` collective, a full state dict. The number of iterations depends on the rank
    when the loop runs over `range(...)` of a number computed from the rank (`range(n + rank)`,
    `range(rank)`), or over a part of a collection picked by the rank (`data[rank::world_size]`,
    `chunks[rank]`, `range(rank, n, world_size)`), directly or through a name or a helper's
    parameter. The collective may be in a function the loop calls, at any depth among the checked
    files.

    ## Why is this bad?
    Every rank must run the same collectives in the same order. A rank that loops more often than
    the others enters a collective no other rank joins: it waits until the process-group timeout
    (gloo: `RuntimeError: [.../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 15000ms
    for recv operation to complete`, torch 2.13 with a 15 s timeout; NCCL: the watchdog ends the
    job after 10 minutes by default), or the others reach their next collective and the two
    mismatch. `torch.distributed.algorithms.Join` evens uneven inputs for DDP, but FSDP modules
    are not Joinable: the inputs themselves must be even.

    A loop over `range` of a number computed from the rank runs a different number of times on
    different ranks: reported as an error. A part picked by the rank has a different length only
    when the collection does not divide evenly among the ranks, which fsdplint cannot know:
    reported as a warning. Parts cut at two bounds both computed from the rank
    (`data[rank * n:(rank + 1) * n]`) are of one length and are not reported; neither is a
    collective over a process group of its own (`group=`), whose ranks may agree.

    ## Example
    ```python
    for x, y in eval_batches[rank::world_size]:  # 3 batches on rank 0, 2 on rank 1
        loss = loss_fn(model(x), y)  # rank 0's third forward all-gathers alone
    ```

    ## Use instead
    ```python
    per_rank = len(eval_batches) // world_size  # or DistributedSampler, which pads, or drop_last=True
    for x, y in eval_batches[rank * per_rank:(rank + 1) * per_rank]:
        loss = loss_fn(model(x), y)
    ```

    ## Fix safety
    No fix: how to even the inputs (pad, drop the remainder, agree on a step count with an
    `all_reduce` of the minimum) is a choice about the data.

    ## References
    - [Uneven inputs: the Join context manager](https://pytorch.org/tutorials/advanced/generic_join.html)
    - [DistributedSampler](https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler)
    - [Collective communication](https://pytorch.org/docs/stable/distributed.html#collective-functions)
    """

    code = "FSDP308"
    name = "uneven-collectives-across-ranks"
    summary = "A loop whose number of iterations depends on the rank runs collectives: the rank that loops more hangs"
    severity = Severity.ERROR
    fix_availability = FixAvailability.NONE
    # The loop is judged only where it reaches a collective: a file that may reach one (`rank` alone
    # would parse every file that says it).
    trigger_tokens = distributed.COLLECTIVE_TOKENS

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.model import RANK_COUNT, RANK_PART
        from fsdplint.rulekit import at, over_a_group

        for flow in program.flows:
            for loop in flow.loops:
                derived = loop.iterable.rank_derived if loop.iterable is not None else None
                if derived not in (RANK_COUNT, RANK_PART):
                    continue
                # Under a rank guard of its own inside the loop, a collective is FSDP203's.
                reached = [(event, name) for event in loop.body(flow) if (name := flow.collective(event)) and not over_a_group(event)
                           and len(event.rank_guards) == len(loop.rank_guards)]
                if not reached:
                    continue
                event, name = reached[0]
                via_loop = f" (via {' → '.join(loop.chain)})" if len(loop.chain) > 1 else ""
                what = "a forward of a sharded module" if name == "forward" else f"the collective `{name}`"
                chain = event.chain[len(loop.chain) - 1:]
                through = f" (via {' → '.join(chain)})" if len(chain) > 1 else ""
                iterable = loop.file.code(loop.node.iter).strip()
                if len(iterable) > 60:
                    iterable = iterable[:57] + "..."
                if derived == RANK_COUNT:
                    how, severity = f"`{iterable}` runs a number of times computed from the rank", None
                else:
                    how, severity = (f"`{iterable}` is a part picked by the rank, whose length differs between ranks unless the "
                                     f"data divides evenly"), Severity.WARNING
                yield Finding(loop.file, loop.node.iter,
                              f"{how}{via_loop}, and the loop runs {what}{through}: the rank that loops more waits in a "
                              f"collective the others never join and hangs; give every rank the same number of iterations "
                              f"(DistributedSampler pads, `drop_last=True`, or a step count all ranks agree on)",
                              severity=severity, related=(at(event, f"`{name}` here"),))
