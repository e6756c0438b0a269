"""Summaries: the walk of a function's body, made once per calling context and applied at every call
that gives the same one.

A call of a function of the run is followed into its body with the arguments substituted for the
parameters (walker.Walker.inline). What that walk does depends on the callee, on how deep the call is,
and on what the caller knows of the arguments: which parameters are modules and which parts of which,
which are rank tests, literals, functions, and what built the objects they hold. That is the context,
`Context.key`, with the caller's own variables numbered in the order they are met, not named.

The first walk in a context is kept as a `Summary`: its events, loops and writes to the flow's tables,
and what it returned. Another call in the same context (in the same flow or another one) gets a copy
of them instead of a walk, in which the caller's variables, events and values of the first call are
replaced by those of this call, the variables the walk made (`save@12:state`, each call's own) are
renamed to new ones, and what the caller puts around every event (its chain of calls, call sites,
rank guards, arms, `with` items, statements) is the new caller's. Where a copy meets something of
the first caller it cannot map, the function is walked again instead: a summary never guesses.

This is what keeps a run from walking `Accelerator.prepare` at each of its 391 calls in accelerate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fsdplint.model import conditions
from fsdplint.model.events import Event, RankGuard
from fsdplint.model.flow import Loop, Write
from fsdplint.model.names import dotted_name
from fsdplint.model.values import NO_KEYWORDS, Element, Ref, Value

if TYPE_CHECKING:
    from fsdplint.model.flow import Flow

_CALL_PREFIX = re.compile(r"([^@:]*)@(\d+):")  # `save@12:` of a root or an arm made by an inlined call


def _renamed(name: str, first_call_id: int, last_call_id: int, offset: int) -> str | None:
    """`name` (a variable or an arm's prefix) with its call id moved by `offset`, when a walk that took
    call ids `first_call_id`..`last_call_id` made it; None when it did not (the caller's)."""
    match = _CALL_PREFIX.match(name)
    if not match or not first_call_id <= int(match.group(2)) <= last_call_id:
        return None
    return f"{match.group(1)}@{int(match.group(2)) + offset}:{name[match.end():]}"


class Unmappable(Exception):
    """The copy met something of the first caller that this call has no counterpart for."""


@dataclass(frozen=True)
class Surroundings:
    """What the caller puts around every event of the callee's walk: the start of each event's tuples."""

    chain: tuple[str, ...]
    call_sites: tuple
    outer: tuple
    rank_guards: tuple[RankGuard, ...]
    contexts: tuple[Event, ...]
    arms: tuple
    facts: tuple


@dataclass
class Context:
    """What the walk of a callee may read of its caller: the key, and the caller's variables, events
    and values it met, in the order they were met (the same order in every context of one key)."""

    key: tuple
    roots: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)


def context_of(flow: Flow, own_prefix: str, env: dict[str, Value], function_id: int, patched: frozenset[str]) -> Context:
    """The calling context of a walk of the function `function_id` from bindings `env`, whose own
    variables start with `own_prefix`. How deep the call is and what built the caller's variables
    are not in it: `Summary.fits` asks them of the walks that depend on them."""
    shaper = _Shaper(flow, own_prefix)
    shape = tuple((name, shaper.value(env[name])) for name in sorted(env))
    shaper.context.key = (function_id, patched, shape)
    return shaper.context


class _Shaper:
    """What a calling context keeps of the caller's values: their shapes, with the caller's variables,
    events and values numbered by first use. (Methods, not closures that call each other: those are
    garbage in a cycle after every call, and the collector is off while a program is analyzed.)"""

    def __init__(self, flow: Flow, own_prefix: str) -> None:
        self.flow = flow
        self.own_prefix = own_prefix
        self.context = Context(())
        self.roots: dict[str, int] = {}
        self.events: dict[int, int] = {}
        self.values: dict[int, int] = {}

    def root(self, name: str) -> object:
        if name.startswith(self.own_prefix):
            return name[len(self.own_prefix):]
        if name not in self.roots:
            self.roots[name] = len(self.roots)
            self.context.roots.append(name)
        return self.roots[name]

    def ref(self, target: Ref | None) -> object:
        return None if target is None else (self.root(target.root), target.path, target in self.flow.optimizer_bindings)

    def event(self, made: Event | None) -> object:
        if made is None:
            return None
        if id(made) not in self.events:
            self.events[id(made)] = len(self.events)
            self.context.events.append(made)
            return (self.events[id(made)], made.kind, made.qname, made.method, made.binding is None, bool(made.targets),
                    type(made.node).__name__, dotted_name(getattr(made.node, "func", None)))
        return self.events[id(made)]

    def value(self, given: Value | None) -> object:
        if given is None:
            return None
        if id(given) in self.values:
            return self.values[id(given)]
        self.values[id(given)] = len(self.values)
        self.context.values.append(given)
        element, ref = given.element, self.ref
        return (self.values[id(given)], ref(given.ref), tuple(sorted((ref(owner) for owner in given.params_of), key=repr)),
                tuple(map(self.event, given.params_read)), ref(given.iterates),
                given.iterates_self, self.event(given.event), _each(self.value, given.elements), _each(self.value, given.visits),
                tuple(id(function.node) for function in given.callees), tuple(id(function.node) for function in given.table), given.rank,
                given.constant, given.literal, given.rank_test, given.always_false,
                (ref(element.container), element.index, element.arms) if element else None, ref(given.each_of), given.built_by,
                given.rank_derived, given.world_size, given.text, given.run_test,
                None if given.entries is None else tuple((key, self.value(entry), id(node)) for key, entry, node in given.entries), given.dtypes, given.type_test,
                conditions.shape(given.formula, ref), given.none_on_some_ranks, given.partial_of)


def maker(flow: Flow, root: str, before: int) -> tuple:
    """What the walk may read of a caller's variable: what built it (a method call on it resolves by
    the class), and the qualified name it was constructed by (a copy of it is built by the same)."""
    made = flow.origin(Value(ref=Ref(root)), before)
    return (made.kind, type(made.node).__name__, dotted_name(getattr(made.node, "func", None))) if made else None, flow.constructor(root, before)


def sharding_state(flow: Flow, root: str, before: int) -> tuple[bool, bool]:
    """What a walk may read of whether a caller's variable is sharded: the flow shards it, or it is a
    module the flow built and never sharded or handed on (`isinstance(model, FSDPModule)`)."""
    ref = Ref(root)
    return flow.sharding_of(ref, before, fsdp=None) is not None, flow.plain_module(ref, before)


def _each(shape, values: tuple[Value, ...] | None) -> tuple | None:
    return None if values is None else tuple(shape(value) for value in values)


@dataclass
class Summary:
    """One walk of a callee's body, in the context it was made in, to be copied into other calls."""

    context: Context
    around: Surroundings
    first_call_id: int  # the call ids the walk took (its own prefix's first): its variables' and arms' names
    last_call_id: int
    start: int  # its events are flow.events[start:start + len(events)] of the flow it was made in
    events: list[Event]
    # Each event's targets, and the bindings set, when the walk ended (a caller may set them later).
    final_targets: list[tuple[Ref, ...]]
    final_bindings: dict[int, Ref]
    loops: list[Loop]
    writes: list[tuple[Write, object, object]]
    calls: frozenset[tuple[int, int]]  # the functions it came to call, each with the depth below `depth` it called from
    stack_hits: frozenset[int]  # ... of those, the ones on the caller's stack, which it did not follow
    depth: int  # the depth of the walk's function
    makers: tuple[tuple[int, tuple], ...] | None  # the caller's variables whose makers it read (by context position), and them; None: unknown
    steps: int
    versions: int
    returned: Value
    walked: tuple[int, ...]  # the functions whose bodies it followed (Flow.walked)
    sharding_states: tuple[tuple[int, tuple[bool, bool]], ...]  # the caller's variables whose sharding it asked (by context position), and it
    decided_by_facts: bool  # it found a test decided by the tests around the call (Walker.statement): it fits where they are the same

    def fits(self, flow: Flow, context: Context, around: Surroundings, stack: tuple[int, ...], depth: int, limit: int) -> bool:
        """The walk would be the same in this call: it stops at the same functions (the caller's stack
        and the depth limit), the caller's variables it asked the makers of were made alike, and the
        tests around the call it read are the same."""
        if self.decided_by_facts and around.facts != self.around.facts:
            return False
        if self.makers is None or {function for function, _ in self.calls}.intersection(stack) != self.stack_hits:
            return False
        if any((self.depth + below >= limit) != (depth + below >= limit) for _, below in self.calls):
            return False
        return all(maker(flow, context.roots[position], len(flow.events)) == made for position, made in self.makers) and \
            all(sharding_state(flow, context.roots[position], len(flow.events)) == state for position, state in self.sharding_states)


class Copier:
    """Copies a summary's walk into a call: its events, loops, writes and result, mapped."""

    def __init__(self, summary: Summary, context: Context, around: Surroundings, first_call_id: int, start: int) -> None:
        self.summary = summary
        self.around = around
        self.id_offset = first_call_id - summary.first_call_id
        self.index_offset = start - summary.start
        recorded = summary.context
        self.roots = dict(zip(recorded.roots, context.roots))
        self.events: dict[int, Event] = {id(old): new for old, new in zip(recorded.events, context.events)}
        self.values: dict[int, Value] = {id(old): new for old, new in zip(recorded.values, context.values)}
        self.own = {id(event): position for position, event in enumerate(summary.events)}
        self.guards: dict[int, RankGuard] = {}
        self.tuples: dict[tuple[str, int], tuple] = {}
        self.arm_entries: dict[int, tuple] = {}
        self.fact_entries: dict[int, tuple] = {}
        self.mapped_refs: dict[int, Ref] = {}

    # names

    def root(self, name: str) -> str:
        """A variable (or an arm's prefix): the caller's counterpart, or the walk's own under this call's ids."""
        mapped = self.roots.get(name)
        if mapped is None:
            mapped = _renamed(name, self.summary.first_call_id, self.summary.last_call_id, self.id_offset)
            if mapped is None:
                raise Unmappable(name)
            self.roots[name] = mapped
        return mapped

    def ref(self, ref: Ref | None) -> Ref | None:
        # Each ref mapped once: the walk's events and values share them, and so do their copies.
        if ref is None:
            return None
        mapped = self.mapped_refs.get(id(ref))
        if mapped is None:
            mapped = self.mapped_refs[id(ref)] = Ref(self.root(ref.root), ref.path)
        return mapped

    def refs(self, refs):
        return type(refs)(self.ref(ref) for ref in refs) if refs else refs

    def rebase(self, field: str, items: tuple, old_base: tuple, new_base: tuple, each) -> tuple:
        """A tuple of the walk, which starts with the first caller's part (`old_base`): this caller's
        part, then the walk's own part, mapped. Events share these tuples: each is mapped once."""
        if items is old_base:
            return new_base  # an event of the callee's own body, outside its tests, loops and calls
        key = (field, id(items))
        mapped = self.tuples.get(key)
        if mapped is None:
            if len(items) < len(old_base) or any(mine is not theirs and (type(mine) is Event or mine != theirs) for mine, theirs in zip(items, old_base)):
                raise Unmappable(items)  # not made by the walk (an element's arms in the caller's value)
            self.tuples[key] = mapped = new_base + tuple(map(each, items[len(old_base):]))
        return mapped

    def arm(self, arm: tuple) -> tuple:
        # An arm's prefix is named as the walk's variables are; each arm mapped once (many tuples hold it).
        mapped = self.arm_entries.get(id(arm))
        if mapped is None:
            (prefix, node), number = arm
            mapped = self.arm_entries[id(arm)] = (self.root(prefix), node), number
        return mapped

    def arms(self, arms: tuple) -> tuple:
        return self.rebase("arms", arms, self.summary.around.arms, self.around.arms, self.arm)

    def fact(self, fact: tuple) -> tuple:
        # A variable a formula names is this call's; a part as written is the same in every call.
        mapped = self.fact_entries.get(id(fact))
        if mapped is None:
            formula, truth = fact
            same = conditions.mapped(formula, self.ref)
            mapped = self.fact_entries[id(fact)] = fact if same is formula else (same, truth)
        return mapped

    def chain(self, chain: tuple[str, ...]) -> tuple[str, ...]:
        return self.rebase("chain", chain, self.summary.around.chain, self.around.chain, _same)

    def guard(self, guard: RankGuard) -> RankGuard:
        if id(guard) not in self.guards:
            self.guards[id(guard)] = RankGuard(guard.node, guard.branch, guard.file, self.chain(guard.chain), guard.equivalent)
        return self.guards[id(guard)]

    def rank_guards(self, guards: tuple) -> tuple:
        return self.rebase("rank_guards", guards, self.summary.around.rank_guards, self.around.rank_guards, self.guard)

    # objects

    def event(self, event: Event | None) -> Event | None:
        if event is None:
            return None
        mapped = self.events.get(id(event))
        if mapped is not None:
            return mapped
        if id(event) not in self.own:
            raise Unmappable(event)
        position = self.own[id(event)]
        binding, targets = self.summary.final_bindings.get(position), self.summary.final_targets[position]
        around, value = self.summary.around, self.value
        # Positional, in the order of Event's fields: a copy is made for each event of every copied walk.
        copy = Event(event.kind, event.node, event.file, event.statement, event.parents, self.chain(event.chain),
                     event.index + self.index_offset, self.refs(targets) if targets else targets, event.qname, event.method,
                     tuple(map(value, event.args)) if event.args else event.args,
                     {key: value(arg) for key, arg in event.kwargs.items()} if event.kwargs else NO_KEYWORDS,
                     self.refs(event.params_of) if event.params_of else event.params_of, self.ref(binding), event.with_item, event.function,
                     self.rebase("outer", event.outer, around.outer, self.around.outer, _same), self.rank_guards(event.rank_guards),
                     self.arms(event.arms), self.rebase("call_sites", event.call_sites, around.call_sites, self.around.call_sites, _same),
                     self.rebase("contexts", event.contexts, around.contexts, self.around.contexts, self.event),
                     value(event.value), event.variable, event.only_if_unset,
                     self.rebase("facts", event.facts, around.facts, self.around.facts, self.fact), event.spread)
        self.events[id(event)] = copy
        return copy

    def value(self, value: Value | None) -> Value | None:
        if value is None:
            return None
        mapped = self.values.get(id(value))
        if mapped is not None:
            return mapped
        if not (value.ref or value.params_of or value.iterates or value.event or value.elements or value.visits or value.element or value.each_of
                or value.entries or value.formula):
            return value  # nothing in it names a variable or an event: the same in every call
        element = value.element
        copy = Value(ref=self.ref(value.ref), params_of=self.refs(value.params_of),
                     params_read=tuple(map(self.event, value.params_read)), iterates=self.ref(value.iterates), iterates_self=value.iterates_self,
                     event=self.event(value.event), elements=self.each(value.elements), visits=self.each(value.visits), callees=value.callees,
                     table=value.table, rank=value.rank, constant=value.constant, literal=value.literal, rank_test=value.rank_test,
                     always_false=value.always_false, each_of=self.ref(value.each_of), built_by=value.built_by, rank_derived=value.rank_derived,
                     world_size=value.world_size, text=value.text, run_test=value.run_test, dtypes=value.dtypes, type_test=value.type_test,
                     entries=None if value.entries is None else tuple((key, self.value(entry), node) for key, entry, node in value.entries),
                     formula=None if value.formula is None else conditions.mapped(value.formula, self.ref), none_on_some_ranks=value.none_on_some_ranks,
                     partial_of=value.partial_of,
                     element=Element(self.ref(element.container), element.index, self.arms(element.arms) if element.arms else ()) if element else None)
        self.values[id(value)] = copy
        return copy

    def each(self, values: tuple[Value, ...] | None) -> tuple[Value, ...] | None:
        return None if values is None else tuple(self.value(value) for value in values)

    def loop(self, loop: Loop) -> Loop:
        return Loop(loop.node, self.value(loop.iterable), loop.file, loop.function, self.chain(loop.chain), loop.first + self.index_offset,
                    loop.end + self.index_offset, self.rank_guards(loop.rank_guards),
                    self.rebase("call_sites", loop.call_sites, self.summary.around.call_sites, self.around.call_sites, _same),
                    self.rebase("outer", loop.around, self.summary.around.outer, self.around.outer, _same),
                    self.rebase("contexts", loop.contexts, self.summary.around.contexts, self.around.contexts, self.event))

    def write(self, write: tuple[Write, object, object]) -> tuple[Write, object, object]:
        kind, key, value = write
        if kind in (Write.ASSIGNED_ROOT, Write.INSTANCE, Write.PER_PASS):
            return kind, self.root(key), value
        if kind is Write.CONSTRUCTED:
            return kind, self.root(key), self.event(value)
        if kind is Write.BINDING:
            return kind, self.event(key), self.ref(value)
        if kind is Write.TARGETS:
            return kind, self.event(key), self.refs(value)
        if kind is Write.OPTIMIZER_BINDING:
            return kind, self.ref(key), value
        if kind is Write.COPIED:
            return kind, self.root(key), self.ref(value)
        if kind is Write.JOINED:
            return kind, self.root(key), self.refs(value)
        if kind in (Write.DERIVED, Write.DERIVED_MORE):
            return kind, self.root(key), {self.root(root) for root in value}
        return write


def _same(item):
    return item


def walk_body(walker, caller_stack: tuple[int, ...], around: Surroundings, call_id: int, depth_limit: int) -> Value:
    """Walks the body of `walker`'s function into its flow, or copies the walk of an earlier call in
    the same context; returns what the body returns."""
    flow, program, callee = walker.flow, walker.flow.program, walker.function
    context = context_of(flow, walker.prefix, walker.env, id(callee.node), walker.patched)
    summaries = program.summaries.setdefault(context.key, [])
    for summary in summaries:
        if summary.fits(flow, context, around, caller_stack, walker.depth, depth_limit):
            try:
                return _apply(summary, flow, context, around, call_id, walker.depth)
            except Unmappable:
                break
    start, loops, writes, steps, versions = len(flow.events), len(flow.loops), len(flow.writes), flow.steps, flow.versions
    decided = flow.decided_by_facts
    attempted, consulted, walked, asked = len(flow.attempted), len(flow.consulted), len(flow.walked), len(flow.asked_sharding)
    walker.walk_function()
    walker.finish_returns()
    events = flow.events[start:]
    calls = frozenset((function, depth - walker.depth) for function, depth in flow.attempted[attempted:])
    positions = {root: position for position, root in enumerate(context.roots)}
    read, sharding = set(flow.consulted[consulted:]), set(flow.asked_sharding[asked:])
    makers = None if any(root not in positions and _renamed(root, call_id, program.last_call_id, 0) is None for root in read | sharding) else \
        tuple((positions[root], maker(flow, root, start)) for root in sorted(read, key=str) if root in positions)
    states = tuple((positions[root], sharding_state(flow, root, start)) for root in sorted(sharding, key=str) if root in positions)
    summaries.append(Summary(
        context, around, call_id, program.last_call_id, start, events, [event.targets for event in events],
        {position: event.binding for position, event in enumerate(events) if event.binding is not None}, flow.loops[loops:],
        flow.writes[writes:], calls, {function for function, _ in calls}.intersection(caller_stack), walker.depth, makers,
        flow.steps - steps, flow.versions - versions, walker.returned, tuple(flow.walked[walked:]), states, flow.decided_by_facts > decided))
    return walker.returned


def _apply(summary: Summary, flow: Flow, context: Context, around: Surroundings, call_id: int, depth: int) -> Value:
    """The summary's walk copied into this call (nothing is written to the flow unless all of it maps)."""
    copier = Copier(summary, context, around, call_id, len(flow.events))
    events = [copier.event(event) for event in summary.events]
    loops = [copier.loop(loop) for loop in summary.loops]
    writes = [copier.write(write) for write in summary.writes]
    returned = copier.value(summary.returned)
    flow.steps += summary.steps
    flow.versions += summary.versions
    flow.decided_by_facts += summary.decided_by_facts
    flow.events += events
    flow.loops += loops
    for write in writes:
        flow.write(*write)
    flow.attempted += [(function, depth + below) for function, below in summary.calls]
    flow.walked += summary.walked
    flow.program.reserve_call_ids(summary.last_call_id - summary.first_call_id)
    return returned
