from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity


class RootOnlySharding(Rule):
    """
    ## What it does
    Finds `fully_shard(model)` on a model none of whose sub-modules was sharded first.

    ## Why is this bad?
    `fully_shard` groups the parameters it is given into one communication unit, leaving out those
    already grouped by earlier calls. Sharding only the root makes the whole model one unit: every
    parameter is all-gathered at once before the forward, nothing overlaps with compute, and the
    peak memory is that of the unsharded model, which is what FSDP was meant to avoid.

    A deliberate single unit for a small sub-module (a vision encoder, an embedding) that is
    followed by sharding the root is not reported: only a root with no sharded sub-module is. Nor is
    a model known to hold no blocks: a single layer, an `nn.Sequential` of layers, or an `nn.Module`
    class of the checked files whose `__init__` builds only layers, or an `nn.Sequential` of them (the
    two-Linear model of a test). Nor a module a loop takes from elements the model does not know (a
    shard plan of blocks then root, sharded by one helper): which module each pass shards is not known.

    ## Example
    ```python
    model = Transformer()
    fully_shard(model)
    ```

    ## Use instead
    ```python
    model = Transformer()
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    ```

    ## Fix safety
    No fix: which blocks to shard is a choice about the model.

    ## References
    - [fully_shard](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
    - [FSDP2 tutorial](https://pytorch.org/tutorials/intermediate/FSDP_tutorial.html)
    """

    code = "FSDP101"
    name = "root-only-sharding"
    summary = "`fully_shard` on the root only: the whole model is one unit"
    severity = Severity.WARNING
    fix_availability = FixAvailability.NONE

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.rulekit import calls, code, forwardless_container, is_leaf_or_part, via

        for flow in program.flows:
            if not flow.is_entry:
                continue  # its callers' flows see what was sharded before it
            shards = list(flow.shard_events(fsdp=2))
            for event in shards:
                if len(event.targets) != 1 or len(event.node.args) == 0:
                    continue
                root = event.target
                if root.is_submodule or not flow.has_local_provenance(root):
                    continue
                # A sub-module sharded: `model.layers[i]`, one taken from the model (`get_submodule`, or
                # through lists: modelscope/twinkle's `(layer, experts)` pairs of the layers a helper found
                # in the model), or one of several parts the paths gave a name (`layers = model.model.layers if te else model.layers`).
                if any(t.root == root.root and t.is_submodule or t.root != root.root and root.root in flow.computed_from(t.root)
                       for other in shards for target in other.targets for t in flow.alternatives(target)):
                    continue
                if flow.escapes(root, 0, event.index) or is_leaf_or_part(flow, root, shards, event) or forwardless_container(flow, event):
                    continue  # a container is FSDP107's
                name = code(event, event.node.args[0].value)
                yield Finding(event.file, event.node,
                              f"`{name}` is sharded as a single unit with no sub-module sharded first{via(event)}: "
                              f"all its parameters are gathered at once; shard its repeated blocks first, if it has any "
                              f"(such as `for block in {name}.layers: fully_shard(block)`)", related=calls(flow, event))
