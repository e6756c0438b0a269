from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity


class DeepcopySharded(Rule):
    """
    ## What it does
    Finds `copy.deepcopy(model)` of a module after it was sharded with `fully_shard`, typically
    for an EMA or a reference model.

    ## Why is this bad?
    FSDP2 modules refuse to be copied: `AssertionError: FSDP does not support deepcopy. Please use
    state dict for serialization.` So does a module that holds one, whose copy copies it. A part of a
    sharded module that holds none (`model.embedding` of `fully_shard(model)`) copies, its parameters
    as DTensors, and is not reported.

    ## Example
    ```python
    fully_shard(model)
    ema = copy.deepcopy(model)
    ```

    ## Use instead
    ```python
    ema = copy.deepcopy(model)
    fully_shard(model)
    fully_shard(ema)
    ```

    ## Fix safety
    No fix: the copy must be sharded in its own right, which is a choice about the copy.

    ## References
    - [fully_shard](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
    """

    code = "FSDP109"
    name = "deepcopy-sharded-module"
    summary = "`copy.deepcopy` of a module sharded with `fully_shard`"
    severity = Severity.ERROR
    fix_availability = FixAvailability.NONE

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.model import CALL, Managed
        from fsdplint.rulekit import at, calls, code, via, where

        for flow in program.flows:
            for event in flow.of_kind(CALL):
                if event.qname != "copy.deepcopy" or not event.args or event.args[0].ref is None:
                    continue
                shard = flow.sharding_of(event.args[0].ref, event.index, fsdp=2, how=Managed.HOLDS_UNIT)
                if shard is not None:
                    yield Finding(event.file, event.node,
                                  f"`{code(event, event.node.args[0].value)}` is sharded (at {where(shard)}){via(event)} and FSDP2 "
                                  f"modules cannot be deep-copied; copy it before `fully_shard` and shard the copy",
                                  related=(at(shard, "sharded here"), *calls(flow, event)))
