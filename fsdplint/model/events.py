"""Events, what a flow is made of: their kinds, the rank guards around them, the exclusive arms they run in."""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Iterator, Mapping

import libcst as cst

from fsdplint.model.conditions import can_hold_together, render, written
from fsdplint.model.syntax import holds_statement, integer_literal, parts_that_hold
from fsdplint.model.values import NO_KEYWORDS, Arms, Ref, Value

if TYPE_CHECKING:
    from fsdplint.model.files import FileModel, FunctionInfo


class EventKind(str, enum.Enum):
    """What an event is."""

    SHARD = "shard"  # fully_shard(target) (FSDP2)
    WRAP = "wrap"  # FullyShardedDataParallel(target) (FSDP1)
    OPTIMIZER = "optimizer"  # an optimizer built over the parameters of `params_of`
    METHOD = "method"  # target.method(...)
    CALL_VALUE = "call_value"  # target(...): a forward when target is a module
    CALL = "call"  # a call of something that is not a local value: qname(args)
    META = "meta"  # target was built on the meta device
    ASSIGN = "assign"  # `target = ...` where target is an attribute (`model.tok_embeddings = new`)
    ENTER = "enter"  # a call of a function of this run, whose events follow inlined: qname(args)
    SET_ENV = "set_env"  # `os.environ[variable] = value`


SHARD, WRAP, OPTIMIZER, METHOD, CALL_VALUE, CALL, META, ASSIGN, ENTER, SET_ENV = EventKind


class GuardBranch(str, enum.Enum):
    """Where code under a RankGuard sits."""

    BODY = "body"  # the body of `if <rank test>:`
    ELSE = "else"  # its `else`/`elif` branch
    AFTER_EXIT = "after-exit"  # the rest of a block after `if not is_main: return` (or `continue`)
    DECORATED = "decorated"  # the body of a function decorated `@rank_zero_only`


GUARD_BODY, GUARD_ELSE, GUARD_AFTER_EXIT, GUARD_DECORATED = GuardBranch


@dataclass(frozen=True, eq=False)
class RankGuard:
    """Code under it runs on some ranks only: a branch of an `if` on a rank test, the rest of a block
    after `if not is_main: return`, or a function decorated `@rank_zero_only`."""

    node: cst.CSTNode  # the `if` statement, or the decorated function
    branch: GuardBranch
    file: FileModel
    chain: tuple[str, ...]  # the functions from the flow's own down to the one holding the guard
    equivalent: tuple[str, bool] | None = None  # the test is a flag that holds exactly where this does (RankTest.equivalent)

    def code(self) -> str:
        """`if dist.get_rank() == 0:`, the guard as written."""
        node = self.node
        if type(node) is cst.If:
            prefix = "if" if self.branch != GUARD_ELSE else "else of if"
            return f"{prefix} {self.file.code(node.test).strip()}:"
        return "@" + ", @".join(self.file.code(d.decorator).strip() for d in node.decorators)

    def condition(self) -> tuple[str, bool]:
        """What the code under the guard knows: (a test, whether it holds), with `not`, `!=` and the
        branch folded in, so that `if not is_main:`'s body and `if is_main:`'s else both give
        `("is_main", False)`, and the rest of a block after `if rank != 0: return` gives `("rank == 0", True)`.
        No rank is negative, so `rank > 0` and `rank >= 1` are `rank != 0` (NeMo's `if rank == 0: ...
        elif rank > 0: ...` splits the ranks in two)."""
        if not type(self.node) is cst.If:
            return self.code(), True
        if self.equivalent is not None:
            test, holds = self.equivalent
            return test, holds if self.branch == GUARD_BODY else not holds
        return self._folded(self.node.test, self.branch == GUARD_BODY)

    def conjuncts(self) -> frozenset[tuple[str, bool]]:
        """What the code under the guard knows, part by part, each folded as `condition` folds a test:
        the body of `if world_size > 1 and rank != 0:` knows `world_size > 1` and not `rank == 0`. A test
        that does not split so (`a and b` where it fails) is one part, its `condition`."""
        if not type(self.node) is cst.If or self.equivalent is not None:
            return frozenset({self.condition()})
        parts = [_fold(part, holds) for part, holds in parts_that_hold(self.node.test, self.branch == GUARD_BODY)
                 if not (type(part) is cst.BooleanOperation and type(part.operator) is (cst.And if holds else cst.Or))]
        # `local_rank is not None and local_rank not in [-1, 0]` (`torch_distributed_zero_first`): whether the
        # rank is None is the same on every rank (no process group), and there it is not 0 either: the
        # test splits the ranks as `local_rank not in [-1, 0]` does, the other ranks' `if local_rank == 0:`.
        compared = {written(test.left) for test, _ in parts if _equals_literal(test)}
        return frozenset((written(test), holds) for test, holds in parts if _none_test_of(test) not in compared)

    def _folded(self, test: cst.CSTNode, holds: bool) -> tuple[str, bool]:
        test, holds = _fold(test, holds)
        return written(test), holds


NO_SPREAD: Mapping[str, cst.CSTNode] = MappingProxyType({})  # a call that takes no keywords from a dict written out (most)

# A part of a test and its truth where an event runs: the part as a formula of what its names hold
# (see conditions: `cfg.fsdp` of a variable of the walk, whatever the name it is reached by).
Fact = tuple[tuple, bool]


@dataclass(slots=True)  # hundreds of thousands on a large repository: no per-instance dict
class Event:
    kind: EventKind
    node: cst.CSTNode
    file: FileModel
    statement: cst.CSTNode  # innermost statement holding the node, in its own block
    parents: tuple[cst.CSTNode, ...]  # compound statements around it, outermost first
    chain: tuple[str, ...]  # functions inlined from the flow's own function down to the node
    index: int = -1  # position in its flow's events; -1 for one never emitted
    targets: tuple[Ref, ...] = ()  # SHARD/WRAP targets, METHOD receiver, CALL_VALUE callee
    qname: str | None = None
    method: str | None = None
    args: tuple[Value, ...] = ()
    kwargs: Mapping[str, Value] = field(default_factory=lambda: NO_KEYWORDS)  # the shared empty one unless given
    params_of: frozenset[Ref] = frozenset()  # OPTIMIZER
    binding: Ref | None = None  # what the call's result was assigned to
    with_item: bool = False  # the call is the context manager of a `with`
    function: FunctionInfo | None = None  # the function whose body holds the node (None: module level)
    # The statements around the call sites it was inlined through, outermost first: for each call,
    # its compound statements and then its own statement.
    outer: tuple[cst.CSTNode, ...] = ()
    rank_guards: tuple[RankGuard, ...] = ()  # the guards around the node, across inlined calls, outermost first
    arms: Arms = ()  # the arm of each branching statement around the node, across inlined calls
    call_sites: tuple[cst.Call, ...] = ()  # the call that entered each function of `chain` after the first
    contexts: tuple[Event, ...] = ()  # the `with` items around the node, across inlined calls, outermost first
    # ASSIGN, SET_ENV: the value assigned (`model.output.weight = model.tok_embeddings.weight`); METHOD: the
    # receiver where it is what an FSDP1 wrap returned (`dist_model.parameters()`, not `model.parameters()`).
    value: Value | None = None
    variable: str | None = None  # SET_ENV: the environment variable set
    only_if_unset: bool = False  # SET_ENV: `os.environ.setdefault(...)`, a default the launcher's own value overrides
    # What holds where it runs, across inlined calls: the tests of the `if`s around it, and of the
    # `assert`s and the `if`s that leave the block before it (Walker.facts_of).
    facts: tuple[Fact, ...] = ()
    # The keywords a call takes from a dict written out (`FSDP(model, **kwargs)`, `kwargs = dict(device_id=rank)`):
    # each one's expression in the dict. Their values are in `kwargs`.
    spread: Mapping[str, cst.CSTNode] = field(default_factory=lambda: NO_SPREAD)

    @property
    def unconditional(self) -> bool:
        """In no arm and under no rank guard: it runs on every rank wherever its flow's body runs on
        to it (a constructor's `self.model = FSDP(model)` at its top level)."""
        return not self.arms and not self.rank_guards

    def may_construct(self) -> bool:
        """A call that may build an object (`Trainer(...)`, `nn.Linear(4, 4)`, a method of a bare name,
        which a classmethod of a class of the file is: `GPT.from_pretrained(...)`), not a method of an
        object's attribute."""
        return type(self.node) is cst.Call and (
            self.kind in (CALL, CALL_VALUE) or self.kind == METHOD and len(self.targets) == 1 and not self.targets[0].path)

    def argument_values(self) -> tuple[list[tuple[cst.CSTNode, Value]], dict[str, tuple[cst.CSTNode, Value]]]:
        """A call event's positional arguments and its keyword arguments, each node with its value."""
        positional = [arg.value for arg in self.node.args if arg.keyword is None and not arg.star]
        keywords = {key: (written, self.kwargs[key]) for key, written in self.spread.items()}
        keywords.update({arg.keyword.value: (arg.value, self.kwargs[arg.keyword.value]) for arg in self.node.args
                         if arg.keyword is not None and arg.keyword.value in self.kwargs})
        return list(zip(positional, self.args)), keywords

    def argument(self, position: int | None, keyword: str) -> tuple[cst.CSTNode, Value] | None:
        """The argument a call gives at `position` (None: keyword only) or as `keyword=`, its node with
        its value; None when not given."""
        positional, keywords = self.argument_values()
        return positional[position] if position is not None and position < len(positional) else keywords.get(keyword)

    def keywords_set_true(self) -> frozenset[str]:
        """The keyword arguments written as `True` (`StateDictOptions(full_state_dict=True)`)."""
        if not type(self.node) is cst.Call:
            return frozenset()
        return frozenset(arg.keyword.value for arg in self.node.args
                         if arg.keyword is not None and type(arg.value) is cst.Name and arg.value.value == "True")

    @property
    def target(self) -> Ref | None:
        return self.targets[0] if self.targets else None

    def _ifs(self) -> Iterator[tuple[cst.If, cst.CSTNode]]:
        """Each `if` on the event's path, here or around a call that led to it, outermost first, with
        the statement (or inlined callee's statement) that comes next on the path."""
        path = self.outer + self.parents + (self.statement,)
        for node, inner in zip(path, path[1:]):
            if type(node) is cst.If:
                yield node, inner

    def branches(self) -> Iterator[tuple[cst.If, bool]]:
        """Each `if` the event runs under, here or around a call that led to it, outermost first, and
        whether the event is in its body (True) or its `else` (False)."""
        for node, inner in self._ifs():
            yield node, holds_statement(node.body, inner)

    def branch_of(self, node: cst.If) -> bool | None:
        """Whether the event runs in the body (True) or the `else:` block (False) of `node`; None when
        neither: not under it, in an `elif`, or in a call in its test."""
        for step, inner in self._ifs():
            if step is node:
                if holds_statement(node.body, inner):
                    return True
                if type(node.orelse) is cst.Else and holds_statement(node.orelse.body, inner):
                    return False
        return None

    def conditions(self) -> set[tuple[str, bool]]:
        """What holds where the event runs, as (test, truth): `facts` written out, a part naming an
        object as that object (`cfg.fsdp` for `c.fsdp` where the walk bound `c` to `cfg`)."""
        return {(render(formula), truth) for formula, truth in self.facts}

    def exclusive(self, other: Event) -> bool:
        """The two sit in different arms of one branching statement (`if`/`elif`/`else`, the rest of a
        block after `if ...: return`, `match` cases, `except` handlers and `else`, a dispatch table's
        entries): they never run in one pass, and neither is before the other."""
        if not self.arms or not other.arms:
            return False
        mine: dict = {}
        for branching, arm in self.arms:
            mine.setdefault(branching, []).append(arm)
        return any(arms_apart(arm, theirs) for branching, theirs in other.arms for arm in mine.get(branching, ()))

    def arm_at(self, branching: cst.CSTNode) -> tuple[tuple[str, int], int] | None:
        """The arm of `branching` the event runs in, as `arms` holds it; None where it runs in none (not
        under it, or past it: the mark of code past a returning arm is no arm of it, values.Arms)."""
        return next(((key, arm) for key, arm in self.arms if key[1] == id(branching) and type(arm) is int), None)

    def _taken_arms(self) -> dict:
        """Each branching statement the event runs in an arm of, with that arm (not the marks of code
        past returning arms)."""
        return {branching: arm for branching, arm in self.arms if type(arm) is int}

    def runs_where_returned(self, other: Event) -> bool:
        """The event runs past a statement one of whose arms holds `other` and returns (values.Arms):
        in a call where `other` runs, this does not; where that arm is not taken, this may."""
        theirs = other._taken_arms()
        return any(type(arm) is frozenset and theirs.get(branching) in arm for branching, arm in self.arms)

    def on_every_path_to(self, other: Event) -> bool:
        """The event runs wherever `other` runs: it sits in no arm of a branching statement (`if`,
        `match`, `except`) that `other` is outside of, or in another arm of; and past a statement some
        of whose arms return or raise, where `other` runs in one of its other arms (eva-clip's
        `set_device(rank)` in `if torch.cuda.is_available():`, whose `else` raises, and the
        `init_process_group` past it) or past it too."""
        theirs, taken = set(other.arms), other._taken_arms()
        return all((branching, arm) in theirs or type(arm) is frozenset and branching in taken and taken[branching] not in arm
                   for branching, arm in self.arms)

    def excludes(self, other: Event) -> bool:
        """The two never run in one execution: they are `exclusive`, or one needs a test true that the
        other needs false (`if args.fsdp: model = FSDP(model)` and `assert not args.fsdp; scaler = GradScaler()`)."""
        if self.exclusive(other):
            return True
        if not self.facts or not other.facts:
            return False
        mine = self.conditions()
        if any((test, not truth) in mine for test, truth in other.conditions()):
            return True
        # minGPU: `if is_fsdp:` (`is_distributed and args.dist == "fsdp"`) against `if (not is_distributed) or is_ddp:`
        return not can_hold_together(self.facts, other.facts)

    def arg_refs(self) -> Iterator[Ref]:
        for value in itertools.chain(self.args, self.kwargs.values()):
            if value.ref:
                yield value.ref

    def touches(self, module: Ref) -> bool:
        """The event acts on `module`: on it or a module in it, on a value of its variable, or on its
        parameters (`nn.init.trunc_normal_(p)` for `p` in `module.parameters()`)."""
        return (any(target.is_within(module) for target in self.targets)
                or any(ref.root == module.root for ref in self.arg_refs())
                or any(owner.is_within(module) for value in itertools.chain(self.args, self.kwargs.values()) for owner in value.params_of))


def arms_apart(arm: int | frozenset[int], other: int | frozenset[int]) -> bool:
    """Two arms of one branching statement that never run in one call: two different arms, or an arm
    and the code past the statement where that arm returned (values.Arms)."""
    if type(arm) is int and type(other) is int:
        return arm != other
    if type(arm) is int:
        return arm in other
    return type(other) is int and other in arm


def _fold(test: cst.CSTNode, holds: bool) -> tuple[cst.CSTNode, bool]:
    """`test` with `not` folded in, and a test that says a rank is not zero written as the rank `== 0`
    not holding (`rank != 0`, `rank > 0`, `local_rank not in [-1, 0]`: no rank is negative)."""
    while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        test, holds = test.expression, not holds
    if type(test) is cst.Comparison and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if _is_not_zero(target) or _is_zero_or_negatives(target):
            equal = target.with_changes(operator=cst.Equal()) if type(target.operator) is cst.NotEqual \
                else target.with_changes(operator=cst.Equal(), comparator=cst.Integer("0"))
            return test.with_changes(comparisons=[equal]), holds if type(target.operator) is cst.In else not holds
    return test, holds


def _is_zero_or_negatives(target: cst.ComparisonTarget) -> bool:
    """`in [-1, 0]` / `not in (-1, 0)`: of the numbers listed, 0 is the only one a rank can be."""
    if type(target.operator) not in (cst.In, cst.NotIn) or type(target.comparator) not in (cst.List, cst.Tuple, cst.Set):
        return False
    literals = [integer_literal(element.value) for element in target.comparator.elements]
    if None in literals:
        return False
    return [number for number in (int(literal, 0) for literal in literals) if number >= 0] == [0]


def _none_test_of(test: cst.CSTNode) -> str | None:
    """`x` of `x is None` / `x is not None`, written out; None for any other test."""
    if type(test) is cst.Comparison and len(test.comparisons) == 1 and type(test.comparisons[0].operator) in (cst.Is, cst.IsNot) \
            and type(test.comparisons[0].comparator) is cst.Name and test.comparisons[0].comparator.value == "None":
        return written(test.left)
    return None


def _equals_literal(test: cst.CSTNode) -> bool:
    """`x == 0`, `x == "0"`: a comparison with a literal, false where x is None."""
    return (type(test) is cst.Comparison and len(test.comparisons) == 1 and type(test.comparisons[0].operator) is cst.Equal
            and type(test.comparisons[0].comparator) in (cst.Integer, cst.SimpleString))


def _is_not_zero(target: cst.ComparisonTarget) -> bool:
    """`!= x`, `> 0` or `>= 1`: (for a rank, which is never negative) the negation of `== x` / `== 0`."""
    operator, bound = type(target.operator), target.comparator
    if operator is cst.NotEqual:
        return True
    return type(bound) is cst.Integer and (operator is cst.GreaterThan and bound.value == "0" or operator is cst.GreaterThanEqual and bound.value == "1")
