"""What the model tracks: references to objects (`Ref`), the values expressions evaluate to (`Value`), ranks and rank tests."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Iterable, Mapping

if TYPE_CHECKING:
    import libcst as cst

    from fsdplint.model.events import Event
    from fsdplint.model.files import FunctionInfo


class RankScope(str, enum.Enum):
    """Which rank a value is."""

    GLOBAL = "global"  # the process's rank among all processes: `RANK`, `dist.get_rank()`
    LOCAL = "local"  # its rank on its own node: `LOCAL_RANK`, `dist.get_node_local_rank()`
    SOME = "some"  # a rank only named as one (`self.rank`, `get_rank()` of a library, `NODE_RANK`): which, unknown


GLOBAL_RANK, LOCAL_RANK, SOME_RANK = RankScope
# How a value computed from the rank differs between ranks (`Value.rank_derived`):
RANK_NUMBER = "number"  # a number computed from the rank by arithmetic: `n + rank`, `rank * 2`
RANK_COUNT = "count"  # an iterable whose length is such a number: `range(n + rank)`, `range(rank)`
# A part of a collection chosen by the rank, whose length differs between ranks unless the collection
# divides evenly: `data[rank::world_size]`, `chunks[rank]`, `range(rank, n, world_size)`. Parts cut at
# bounds both computed from the rank (`data[rank * k:(rank + 1) * k]`) are of one length: not one.
RANK_PART = "part"
# For each branching statement around a node: ((the inlined call's prefix, id of the statement), which
# arm); or, for code past a branching statement some of whose arms return (`except StopIteration:
# return None`), the arms it never runs after, as a frozenset: it runs in the same call only where
# none of those ran (Walker.branches). `Event.exclusive` and `Event.runs_where_returned` read the second
# kind (`events.arms_apart`); elsewhere it is one more arm.
Arms = tuple[tuple[tuple[str, int], int | frozenset[int]], ...]


# Steps of a Ref's path: `[]` is any one element (`model.layers[i]`, `m` in `model.children()`); `*`
# is the module itself or any module under it (`m` in `model.modules()`, which starts with `model`).
ANY_ELEMENT, SELF_OR_BELOW = "[]", "*"
_ANY_STEP = (ANY_ELEMENT, SELF_OR_BELOW)


@dataclass(frozen=True, slots=True)
class Ref:
    """A tracked value: `root` is a flow-unique variable, `path` the attributes reached from it."""

    root: str
    path: tuple[str, ...] = ()

    def child(self, name: str) -> Ref:
        return Ref(self.root, self.path + (name,))

    @property
    def name(self) -> str:
        """The root as its function's code spells it, without the inlined call's prefix (`save@3:`)
        or the binding's version (`model#2`)."""
        return self.root.rpartition(":")[2].partition("#")[0]

    @property
    def variable(self) -> str:
        """The variable the root is a binding of, whichever binding (`model` for `model#2`)."""
        return self.root.partition("#")[0]

    @property
    def is_submodule(self) -> bool:
        return bool(self.path)

    def dotted(self) -> str:
        """The root and the path as one name (`main@3:cfg.fsdp`): the same object, the same name."""
        return ".".join((self.root, *self.path))

    def is_within(self, other: Ref) -> bool:
        """True when self is other or reached from it (`[]` matches any one step)."""
        if self.root != other.root or len(self.path) < len(other.path):
            return False
        return all(mine == theirs or mine in _ANY_STEP or theirs in _ANY_STEP for mine, theirs in zip(self.path, other.path))

    def overlaps(self, other: Ref) -> bool:
        """One of the two is the other or inside it: what is done to either touches both."""
        return self.is_within(other) or other.is_within(self)

    def is_one_of(self, other: Ref) -> bool:
        """`self` is `other` or one of the modules its `[]` steps stand for (`model.layers.0` of
        `model.layers.[]`), as far as known: a step of `self` that stands for any (`model.*.proj`) may be
        another module than `other`'s."""
        return self.root == other.root and len(self.path) == len(other.path) \
            and all(mine == theirs or theirs in _ANY_STEP for mine, theirs in zip(self.path, other.path))

    def may_be(self, other: Ref) -> bool:
        """`self` is `other`, or may be: `m` in `for m in model.modules()` (`model.*`) may be `model` itself."""
        return self == other or self.path[-1:] == (SELF_OR_BELOW,) and Ref(self.root, self.path[:-1]).may_be(other)


@dataclass(frozen=True)
class Rank:
    """A value that is a process rank (`scope` GLOBAL_RANK, LOCAL_RANK or SOME_RANK), or a string
    formatted from one when `formatted` (`f"cuda:{rank}"`)."""

    scope: RankScope
    formatted: bool = False
    variable: str | None = None  # the environment variable it was read from (`RANK`); None: a call


@dataclass(frozen=True, slots=True)
class Element:
    """A value that is one direct element of a container (`model.layers[0]`, `layer` in `for layer in
    model.layers`), which the ref's `[]` step alone does not tell from a module at any depth
    (`m` in `for m in model.modules()`)."""

    container: Ref  # the container (`model.layers`)
    # The subscript's literal index as written (`"0"`, `"'attn'"`), "?" for a computed one; None for a
    # loop variable that is, in turn, each element of the container.
    index: str | None
    arms: Arms = ()  # for a loop variable, the arms the loop runs in (Event.arms of code not under a test in its body)


NO_REFS: frozenset[Ref] = frozenset()  # the one empty set of refs: each empty frozenset is 216 bytes of its own
NO_KEYWORDS: Mapping[str, Value] = MappingProxyType({})  # the one empty, read-only mapping of a call's keywords (most calls)


def refs_of(values: Iterable[Value]) -> frozenset[Ref]:
    """The refs whose parameters flow into any of `values` (their `params_of` together); NO_REFS, shared, when none."""
    found = [value.params_of for value in values if value.params_of]
    if not found:
        return NO_REFS
    return found[0] if len(found) == 1 else found[0].union(*found[1:])


def reads_of(values: Iterable[Value]) -> tuple[Event, ...]:
    """Where the state that flows into any of `values` was taken (their `params_read` together, in
    order); () when one of them holds some state without saying where (not known)."""
    holding = [value for value in values if value.params_of]
    if not holding or any(not value.params_read for value in holding):
        return ()
    if len(holding) == 1:
        return holding[0].params_read
    return tuple({id(read): read for value in holding for read in value.params_read}.values())  # events hash by identity here


@dataclass(slots=True)  # one for each expression evaluated: no per-instance dict
class Value:
    """What an expression evaluates to, as far as the model cares."""

    ref: Ref | None = None
    params_of: frozenset[Ref] = NO_REFS  # parameters of these modules flow into the value
    # The events that took the state of `params_of`'s modules (`model.state_dict()` in one arm of an
    # `if`), where each module's was taken by one of them; () where not known. Whether the state is
    # sharded is a question about those places, not about where the value is used.
    params_read: tuple[Event, ...] = ()
    iterates: Ref | None = None  # iterating the value yields sub-modules of this ref
    iterates_self: bool = False  # ... and the module `iterates` itself first (`model.modules()`)
    event: Event | None = None  # the event that produced the value
    elements: tuple[Value, ...] | None = None  # a tuple or list literal, element by element
    # What iterating the value visits, in order, when known: a literal's elements, `itertools.chain`'s
    # parts one after the other (an element of an iterable part stands for all of it), `enumerate`,
    # `reversed`, `zip` of those.
    visits: tuple[Value, ...] | None = None
    callees: tuple[FunctionInfo, ...] = ()  # calling the value calls one of these functions of the run
    table: tuple[FunctionInfo, ...] = ()  # a dispatch table: a dict whose values are these functions
    # A dict with string keys, written out (`{"lr": 1e-3}`, `dict(lr=1e-3)`) and not changed since: its
    # entries in order, which `f(**d)` passes as keywords, each with the expression written for it.
    entries: tuple[tuple[str, Value, cst.CSTNode], ...] | None = None
    rank: Rank | None = None  # the value is (or formats) the process's rank
    constant: str | None = None  # "None", "True" or "False": a literal passed for a parameter
    literal: str | None = None  # the literal this binding of a name was given, even where `constant` is not trusted
    rank_test: RankTest | None = None  # a condition whose outcome depends on the rank
    always_false: bool = False  # a parameter left at its default `False`/`None`: `if` on it takes no branch
    element: Element | None = None  # the value is a direct element of a container (see Element)
    each_of: Ref | None = None  # iterating the value visits every direct element of this container (`model.layers.items()`)
    # The class (or function) a call built the object by, through methods that return it (`TinyLM(args).to(device)`):
    # its qualified name, or its name alone for a class of the file.
    built_by: str | None = None
    # How the value differs between ranks when computed from the rank (RANK_NUMBER, RANK_COUNT, RANK_PART).
    rank_derived: str | None = None
    world_size: bool = False  # the number of processes: `dist.get_world_size()`, `WORLD_SIZE`, `world_size`
    # Whether the run is distributed at all (`dist.is_initialized()`), or its negation: the same on
    # every rank, and where the run is not distributed, one process runs.
    run_test: bool = False
    # The string it holds, where known: a literal, a parameter passed or defaulting to one, a name
    # assigned one once, an f-string of those (a part not known stands as UNKNOWN_PART).
    text: str | None = None
    # The torch dtypes it is one of (`torch.float16`; `{"fp16": torch.float16, ...}[name]`), where it is known to be one.
    dtypes: frozenset[str] | None = None
    # A test of whether a module or tensor is sharded (`isinstance(model, FSDPModule)`, `isinstance(p,
    # DTensor)`), or computed from one: it holds where the object is one, which the model does not know.
    type_test: bool = False
    # A test bound to a name (`is_fsdp = is_distributed and args.dist == "fsdp"`): what it was computed
    # from, as a formula (see conditions), for the tests that read the name.
    formula: tuple | None = None
    # None on some ranks only: what a function returns that returns None under a test of the rank and
    # an object elsewhere (open-r1's `get_gathered_state_dict`: the state dict on rank 0, None on the
    # others). Whether it is None is a test of the rank.
    none_on_some_ranks: bool = False
    # `functools.partial(fully_shard, mesh=mesh)` of a function no file of the run defines, given
    # keywords only: its qualified name. Calling the value calls it, with the keywords `entries` holds.
    partial_of: str | None = None


# In a Value's text, a part whose text is not known: no address or name holds it, so that
# `f"tcp://{host}:{port}"` with `host` known starts with `"tcp://localhost:"` and equals nothing.
UNKNOWN_PART = "\x00"


@dataclass(frozen=True)
class RankTest:
    """A condition that depends on the rank.

    `when_true`: where it is true, it is true on some ranks only (`rank == 0`, `is_main_process`).
    `when_false`: where it is false, it is false on some ranks only. `rank == 0` is both;
    `rank == 0 and step % 100 == 0` is only `when_true` (at most steps it is false on every rank).
    """

    when_true: bool
    when_false: bool
    # A flag set in the arms of a test on the rank (`server = True; if rank > 0: server = False`) is
    # true exactly where that test, as RankGuard.condition writes it, has this truth.
    equivalent: tuple[str, bool] | None = None
    # Where it holds, one rank of this scope passes: `local_rank == 0` (one process per node), `rank == 0`.
    pins: RankScope | None = None

    def negated(self) -> RankTest:
        flipped = (self.equivalent[0], not self.equivalent[1]) if self.equivalent else None
        return RankTest(self.when_false, self.when_true, flipped)

    @staticmethod
    def combine(operator: str, left: RankTest | None, right: RankTest | None) -> RankTest | None:
        """`left and right` / `left or right`; None for a condition every rank sees alike."""
        left, right = left or RankTest(False, False), right or RankTest(False, False)
        if operator == "and":  # where both hold, what pins one pins it
            combined = RankTest(left.when_true or right.when_true, left.when_false and right.when_false, pins=left.pins or right.pins)
        else:
            combined = RankTest(left.when_true and right.when_true, left.when_false or right.when_false)
        return combined if combined.when_true or combined.when_false else None


