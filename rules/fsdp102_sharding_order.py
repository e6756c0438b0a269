from __future__ import annotations

from enum import Enum
from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity


class _OwnState(Enum):
    """What the root's class gives `self` besides the blocks sharded here."""

    NOTHING = "nothing"  # literals and builtins' scalars only: no parameter is left unreduced
    SOMETHING = "something"  # a module, a parameter, or a value the class makes that may be one
    GIVEN = "given"  # values its construction gives it (`num_masks=args.num_masks`) that may be modules
    UNREAD = "unread"  # its class, or a base class, is one this run cannot read


class ShardingOrder(Rule):
    """
    ## What it does
    Finds `fully_shard` applied top-down (the root before its blocks), and blocks sharded while
    the root is never sharded, though it is trained: its forward runs, or an optimizer is built
    over its parameters. (A block sharded and run on its own, as a test does, is fine.) A root
    whose class gives `self` nothing but the blocks sharded here and plain numbers (written in the
    class, or given to its constructor as literals) holds no parameter of its own and is fine too.
    The finding is a warning where fsdplint cannot see what the root holds: its class (or a base
    class) is not in the checked files, or it keeps values its constructor is given that may be
    modules (`num_masks=args.num_masks`), which the message names.

    ## Why is this bad?
    `fully_shard` must be applied bottom-up. Sharding a block after its root fails with
    `TypeError: Invariant encountered: value was None when it should not be` (or `RuntimeError:
    Cannot concatenate overlapping meshes` with a named mesh). Sharding the blocks but never the
    root leaves the root's own parameters (embeddings, final norm, output layer) as plain tensors
    whose gradients are never reduced: the ranks silently diverge after the first step.

    When a helper shards the blocks and its caller calls it after sharding the root, the call is
    reported (the helper is right), with the blocks' `fully_shard` as a related location.

    ## Example
    ```python
    fully_shard(model)
    for block in model.layers:
        fully_shard(block)
    ```

    ## Use instead
    ```python
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    ```

    ## Fix safety
    Unsafe: the fix moves `fully_shard(model)` after the last block's sharding, or adds it there
    when it is missing (with the mesh and policies of the blocks' call). Moving a statement can
    change what the code between sees, so it needs `--unsafe-fixes`.

    ## References
    - [fully_shard](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
    """

    code = "FSDP102"
    name = "sharding-order"
    summary = "`fully_shard` applied top-down, or blocks sharded but never the root"
    severity = Severity.ERROR
    fix_availability = FixAvailability.UNSAFE

    def check(self, program) -> Iterable[Finding]:
        for flow in program.flows:
            yield from self._top_down(flow)
            if flow.is_entry:
                yield from self._root_never_sharded(flow)

    def _top_down(self, flow) -> Iterable[Finding]:
        from fsdplint.fixes import Fix, MoveAfter
        from fsdplint.rulekit import anchor_in_block, at, caller_site, calls, code, is_simple_statement, via, where

        shards = list(flow.shard_events(fsdp=2))
        for root_event in shards:
            roots = [t for t in root_event.targets if not t.is_submodule]
            for root in roots:
                # Not one in the other branch of an `if` the root's shard is under (OLMo-core shards
                # root-last in both branches of `if not self.use_combined_forward:`).
                late = [e for e in shards if e.index > root_event.index and not e.excludes(root_event) and any(
                    t.root == root.root and t.is_submodule and not self._replaced_between(flow, t, root_event.index, e.index)
                    for t in e.targets)]
                if not late:
                    continue
                anchor = anchor_in_block(root_event, late[-1])
                fix = None
                if anchor is not None and anchor is not root_event.statement and is_simple_statement(root_event.statement):
                    fix = Fix("Move the root's `fully_shard` after its blocks'", safe=False,
                              operations=[MoveAfter(root_event.statement, anchor)])
                for event in late:
                    block = code(event, event.node.args[0].value)
                    root_here = at(root_event, "root sharded here")
                    # A helper that shards blocks is right; its caller calls it after sharding the root.
                    helper_call = caller_site(flow, event, root_event)
                    if helper_call is None:
                        yield Finding(event.file, event.node, f"`{block}` is sharded after its root "
                                      f"(sharded at {where(root_event)}){via(event)}: apply `fully_shard` bottom-up", fix,
                                      related=(root_here, *calls(flow, event)))
                        continue
                    yield Finding(helper_call.file, helper_call.node, f"`{code(helper_call, helper_call.node.func)}(...)` shards `{block}` "
                                  f"after its root (sharded at {where(root_event)}){via(event)}: apply `fully_shard` bottom-up", fix,
                                  related=(root_here, at(event, "block sharded here"), *calls(flow, event, below=helper_call.node)))

    def _root_never_sharded(self, flow) -> Iterable[Finding]:
        import libcst as cst

        from fsdplint.fixes import Fix, InsertAfter, parse_statements
        from fsdplint.model import Ref
        from fsdplint.rulekit import calls, code, local_name, statement_after_loops, taken_from_sharded, via

        shards = list(flow.shard_events(fsdp=2))
        roots = {Ref(t.root) for e in shards for t in e.targets if t.is_submodule}
        for root in roots:
            if not flow.has_local_provenance(root) or flow.returned.ref and flow.returned.ref.root == root.root:
                continue
            if not flow.bindings.get(root) and root.root not in flow.constructed:
                continue  # not a call's result: a list of modules built here (`[m for m in model.modules() if ...]`)
            if any(t.may_be(root) for e in flow.shard_events() for t in e.targets) or taken_from_sharded(flow, root, list(flow.shard_events())):
                continue  # sharded, or maybe (`for m in model.modules(): fully_shard(m)` reaches `model` too; a part taken from a sharded module)
            block_shards = [e for e in shards if any(t.root == root.root and t.is_submodule for t in e.targets)]
            last = block_shards[-1]
            if flow.escapes(root, last.index) or any(isinstance(parent, cst.If) for parent in last.parents):
                continue  # handed to code this run cannot see, or sharded on a path we cannot tell is taken
            if not self._trained(flow, root):
                continue  # a block sharded and run alone (VeOmni's tests): the root's own parameters are never trained here
            own_state, given = self._own_state(flow, root, block_shards)
            if own_state is _OwnState.NOTHING:
                continue  # a composite of modules each sharded on its own: the root holds no parameter of its own
            name = local_name(flow, root)
            anchor = statement_after_loops(block_shards) if name else None
            fix = None
            if anchor is not None:
                call = last.node
                keywords = "".join(f", {code(last, arg)}" for arg in call.args if arg.keyword and arg.keyword.value != "reshard_after_forward")
                statement = parse_statements(last.file, f"{code(last, call.func)}({name}{keywords})\n")
                fix = Fix(f"Shard the root: `fully_shard({name})` after its blocks", safe=False,
                          operations=[InsertAfter(anchor, statement)])
            shown = name or root.name
            if own_state is _OwnState.UNREAD:
                yield Finding(last.file, last.node, f"blocks of `{shown}` are sharded but `{shown}` itself never is{via(last)}: "
                              f"if its class holds parameters of its own (it is not in the checked files), they stay plain "
                              f"tensors whose gradients are never reduced", fix, severity=Severity.WARNING, related=calls(flow, last))
            elif own_state is _OwnState.GIVEN:
                kept = " or ".join(f"`{shown}.{attribute}`" for attribute in given)
                yield Finding(last.file, last.node, f"blocks of `{shown}` are sharded but `{shown}` itself never is{via(last)}: "
                              f"if {kept}, given to its constructor, holds parameters, they stay plain tensors whose "
                              f"gradients are never reduced", fix, severity=Severity.WARNING, related=calls(flow, last))
            else:
                yield Finding(last.file, last.node, f"blocks of `{shown}` are sharded but `{shown}` itself never is{via(last)}: "
                              f"its own parameters stay plain tensors whose gradients are never reduced", fix, related=calls(flow, last))

    @staticmethod
    def _trained(flow, root) -> bool:
        """The root takes part in training in this flow: its forward runs (`model(x)`, `model.forward(x)`),
        or an optimizer is built over its parameters."""
        from fsdplint.model import CALL_VALUE, METHOD, OPTIMIZER

        def is_root(ref) -> bool:
            return ref is not None and ref.root == root.root and not ref.path

        return any(event.kind == CALL_VALUE and is_root(event.target) or event.kind == METHOD and event.method == "forward" and is_root(event.target)
                   or event.kind == OPTIMIZER and any(map(is_root, event.params_of)) for event in flow.of_kind(CALL_VALUE, METHOD, OPTIMIZER))

    @staticmethod
    def _own_state(flow, root, block_shards) -> tuple[_OwnState, list[str]]:
        """What the root's class gives `self` besides the sub-modules sharded here, read from the class
        that built it (`Flow.class_of_object`: `Composite(...)`, through `.cuda()`) and its bases:
        `nn.Module` and classes of the run (Automodel's composite of a base model and a drafter, each
        sharded, with a checkpointing mixin that holds nothing); with, for GIVEN, the attributes kept
        from arguments that may be modules (`Flow.attribute_holdings`)."""
        from fsdplint.model import Holds
        from fsdplint.model.syntax import own_attributes

        end = len(flow.events)
        found = flow.class_of_object(root.root, end, through_packages=True)
        if found is None:
            return _OwnState.UNREAD, []
        held: set[str] = set()
        is_module = False
        for entry in flow.program.class_lineage(*found, through_packages=True):
            if entry == "torch.nn.Module":
                is_module = True
                continue
            if not isinstance(entry, tuple):
                return _OwnState.UNREAD, []  # a base this run cannot read
            attributes = own_attributes(entry[0].classes[entry[1]])
            if attributes is None:
                return _OwnState.SOMETHING, []  # `setattr(self, ...)`, `self.register_parameter(...)`
            held |= attributes
        sharded = {target.path[0] for event in block_shards for target in event.targets if target.root == root.root and len(target.path) == 1}
        holdings = flow.attribute_holdings(root.root, end, through_packages=True)
        rest = held - sharded - {attribute for attribute, holds in holdings.items() if holds is Holds.NO_PARAMETERS}
        given = sorted(attribute for attribute in rest if holdings.get(attribute) is Holds.UNKNOWN)
        if not is_module or rest - set(given):
            return _OwnState.SOMETHING, []
        return (_OwnState.GIVEN, given) if given else (_OwnState.NOTHING, [])

    @staticmethod
    def _replaced_between(flow, module, start: int, end: int) -> bool:
        """`model.tok_embeddings = new_embedding` after the root was sharded: the new module is
        sharded in its own right, which is valid."""
        from fsdplint.model import ASSIGN

        return any(e.kind == ASSIGN and module.is_within(e.target) for e in flow.events[start:end])
