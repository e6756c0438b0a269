from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator

from fsdplint.rule import Finding, FixAvailability, Rule, Severity

if TYPE_CHECKING:
    from fsdplint.model import Event, Flow, Ref

# The parameters modules are tied by (`output.weight = tok_embeddings.weight`).
_TIED_NAMES = frozenset({"weight", "bias"})


@dataclass(frozen=True)
class _Tie:
    first: Ref  # the modules that share the parameter
    second: Ref
    parameter: str
    made: Event  # the assignment that ties them
    index: int  # the shard calls that split them must come after this event of the flow (-1: at construction)
    certain: bool  # the assignment runs wherever the model is built (no test around it)


class TiedParametersSplitAcrossUnits(Rule):
    """
    ## What it does
    Finds two modules that share a parameter (`self.output.weight = self.tok_embeddings.weight`,
    tied input and output embeddings) placed in different `fully_shard` units: one of them is
    sharded by a call that leaves the other out (`fully_shard(model.output)`), and the other by
    another call (`fully_shard(model)`).

    The tie is read from the assignment, in the `__init__` of the model's class (and what it calls)
    or in the function that shards; only sharding calls that run together (no test around one that
    is not around the other) and whose modules are named without a loop are compared. A tie under
    a test (`if config.tie_embeddings:`) is reported as a warning.

    ## Why is this bad?
    FSDP2 manages each parameter in one unit. A parameter that two units hold is refused when the
    units are set up, at the first forward: `ValueError: Parameter 'output.weight' is shared with a
    parameter already managed by another FSDP group. For shared/tied parameters, use
    fully_shard([module_a, module_b]) to place them in the same FSDP group.` (torch 2.13).

    ## Example
    ```python
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model.output)
    fully_shard(model)
    ```

    ## Use instead
    ```python
    for layer in model.layers:
        fully_shard(layer)
    fully_shard([model.tok_embeddings, model.output])
    fully_shard(model)
    ```

    Or leave both modules to the root's unit (drop `fully_shard(model.output)`).

    ## Fix safety
    No fix: whether to group the two modules in one call or leave them to an outer unit changes
    what is all-gathered when, which is a choice about memory.

    ## References
    - [fully_shard](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
    """

    code = "FSDP111"
    name = "tied-parameters-split-across-units"
    summary = "Modules that share a parameter are sharded in different `fully_shard` units"
    severity = Severity.ERROR
    fix_availability = FixAvailability.NONE
    trigger_tokens = ("fully_shard",)

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.rulekit import at, calls, code, via, where

        class_ties = _class_ties(program)
        for flow in program.flows:
            shards = [event for event in flow.shard_events(fsdp=2) if event.targets]
            if len(shards) < 2:
                continue
            reported: set[int] = set()
            for tie in (*_flow_ties(flow), *_constructed_ties(flow, class_ties)):
                for alone, other in ((tie.first, tie.second), (tie.second, tie.first)):
                    split = _split(flow, shards, tie, alone, other)
                    if split is None or id(split[0].node) in reported:
                        continue
                    unit, holder = split
                    # One finding a pair: the other side's is the same split, seen from its module.
                    reported |= {id(unit.node), id(holder.node)}
                    condition = "" if tie.certain else " where the test around the tie holds"
                    yield Finding(
                        unit.file, unit.node,
                        f"`{_spell(alone)}.{tie.parameter}` is tied to `{_spell(other)}.{tie.parameter}` (at {where(tie.made)}), but "
                        f"`{code(unit, unit.node)}` shards `{_spell(alone)}` in a unit without `{_spell(other)}`, which "
                        f"`{code(holder, holder.node)}` shards (at {where(holder)}){via(unit)}: FSDP2 raises `ValueError` at the first "
                        f"forward{condition} (\"shared with a parameter already managed by another FSDP group\"); shard both in one call: "
                        f"`fully_shard([{_spell(alone)}, {_spell(other)}])`, or leave both to one outer unit",
                        severity=None if tie.certain else Severity.WARNING,
                        related=(at(tie.made, "tied here"), at(holder, "the other module sharded here"), *calls(flow, unit)))


def _spell(ref: Ref) -> str:
    return ".".join((ref.name, *ref.path))


def _tie_of(event: Event) -> tuple[Ref, Ref, str] | None:
    """`a.x.weight = a.y.weight`: the two modules of one root that share the parameter, and its name."""
    from fsdplint.model import Ref

    target, value = event.target, event.value.ref if event.value is not None else None
    if target is None or value is None or target.root != value.root or len(target.path) < 2 or len(value.path) < 2:
        return None
    if target.path[-1] != value.path[-1] or target.path[-1] not in _TIED_NAMES or "[]" in target.path + value.path:
        return None
    first, second = Ref(target.root, target.path[:-1]), Ref(value.root, value.path[:-1])
    if first.overlaps(second):
        return None
    return first, second, target.path[-1]


def _class_ties(program) -> dict[str, list[tuple[Event, tuple[Ref, Ref, str], str]]]:
    """By class name: the ties the class's `__init__` makes on `self` (and the methods it calls), each
    with the module of the class."""
    from fsdplint.model import ASSIGN

    ties: dict[str, list] = {}
    for flow in program.flows:
        function = flow.function
        if function is None or function.class_name is None or function.name != "__init__":
            continue
        for event in flow.of_kind(ASSIGN):
            tie = _tie_of(event)
            if tie is not None and tie[0].root == "self":
                ties.setdefault(function.class_name, []).append((event, tie, flow.file.module_name))
    return ties


def _constructed_ties(flow: Flow, class_ties) -> Iterator[_Tie]:
    """The ties of the models this flow builds: `model = Transformer(args)` where `Transformer.__init__` ties."""
    from fsdplint.model import Ref

    for root, qname in flow.instances.items():
        module, _, name = qname.rpartition(".")
        candidates = [entry for entry in class_ties.get(name, ())
                      if not module or entry[2] == module or entry[2].endswith("." + module) or module.endswith("." + entry[2])]
        if len({entry[2] for entry in candidates}) != 1:
            continue  # no class of that name ties, or several do
        for made, (first, second, parameter), _ in candidates:
            yield _Tie(Ref(root, first.path), Ref(root, second.path), parameter, made, -1, certain=not made.arms)


def _flow_ties(flow: Flow) -> Iterator[_Tie]:
    """The ties the flow itself makes: `model.output.weight = model.tok_embeddings.weight`."""
    from fsdplint.model import ASSIGN

    for event in flow.of_kind(ASSIGN):
        tie = _tie_of(event)
        if tie is not None and tie[0].root != "self":
            yield _Tie(*tie, made=event, index=event.index, certain=True)


def _split(flow: Flow, shards: list[Event], tie: _Tie, alone: Ref, other: Ref) -> tuple[Event, Event] | None:
    """A shard call that puts `alone` in a unit that cannot hold `other`, and another that shards
    `other`, both after the tie, running together, with neither module replaced since the tie."""
    from fsdplint.model import ASSIGN

    def names(event: Event, module: Ref) -> bool:  # a target named without a loop holds the module
        return any("[]" not in target.path and module.is_within(target) for target in event.targets)

    def may_hold(event: Event, module: Ref) -> bool:  # `[]` stands for any module there
        return any(module.is_within(target) for target in event.targets)

    for unit in shards:
        if unit.index <= tie.index or not names(unit, alone) or may_hold(unit, other):
            continue
        if tie.index >= 0 and not tie.made.on_every_path_to(unit):
            continue
        for holder in shards:
            if holder is unit or holder.index <= tie.index or not names(holder, other) or set(holder.arms) != set(unit.arms):
                continue
            if may_hold(holder, alone) and holder.index < unit.index:
                continue  # `fully_shard(model)` first, then a module in it: another mistake (FSDP102)
            last = max(unit.index, holder.index)
            replaced = [event.target for event in flow.events[tie.index + 1:last]
                        if event.kind == ASSIGN and event.target is not None and event is not tie.made]
            if any(module.overlaps(target) for target in replaced for module in (alone, other)):
                continue
            return unit, holder
    return None
