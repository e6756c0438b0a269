"""The one semantic model every rule reads.

For each parsed file: its imports (local name -> qualified name), its functions and classes, and the
attributes its classes assign containers to. For the whole run: one `Flow` per function (and per
module body) holding the ordered events of that function, with the events of every function it calls
that is defined in the checked files inlined at the call site (arguments substituted for parameters),
so that `shard_model(model)` followed by `build_optimizer(model)` reads as one sequence even across
files.

Values are tracked as `Ref`s: a root (a local name, made unique per inlined call) and a path of
attributes, where `[]` stands for any element (`model.layers[i]`, a loop variable over
`model.layers`, a module from `model.modules()`). Name resolution is done here from the import
statements, not with LibCST's ScopeProvider/QualifiedNameProvider, which cost about 0.5 s a file.

Ranks: values know whether they are this process's rank (`Value.rank`, global or local where the
value says which) or a condition only some ranks
pass (`Value.rank_test`, by fsdplint/distributed.py's vocabulary and through assignments and the
functions of the run), each event knows the rank guards around it across inlined calls
(`Event.rank_guards`, with `Event.call_sites` for the calls that led there), and `Flow.collective`
says which events every rank must reach.
"""

from __future__ import annotations

import builtins
import copy
import dataclasses
import heapq
import itertools
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator

import libcst as cst
from libcst.metadata import CodeRange, PositionProvider

from fsdplint import distributed
from fsdplint.plan import module_name_for
from fsdplint.source import SourceFile

FULLY_SHARD = "torch.distributed.fsdp.fully_shard"
FSDP1_WRAPPER = "torch.distributed.fsdp.FullyShardedDataParallel"

# Private and historical module paths that re-export the public FSDP objects.
_CANONICAL_PREFIXES = (
    ("torch.distributed._composable.fsdp.fully_shard.", "torch.distributed.fsdp."),
    ("torch.distributed._composable.fsdp.", "torch.distributed.fsdp."),
    ("torch.distributed.fsdp._fully_shard._fully_shard.", "torch.distributed.fsdp."),
    ("torch.distributed.fsdp._fully_shard.", "torch.distributed.fsdp."),
    ("torch.distributed.fsdp.fully_sharded_data_parallel.", "torch.distributed.fsdp."),
    ("torch.distributed.tensor._api.", "torch.distributed.tensor."),
    ("torch.distributed.checkpoint.state_dict_saver.", "torch.distributed.checkpoint."),
    ("torch.distributed.checkpoint.state_dict_loader.", "torch.distributed.checkpoint."),
)
_BUILTINS = frozenset(dir(builtins))
_CONSTANTS = frozenset({"None", "True", "False"})
# Builtins that pass an iterable through: iterating `enumerate(model.layers)` iterates the layers.
_ITERABLE_WRAPPERS = frozenset({"enumerate", "reversed", "list", "sorted", "tuple", "iter", "zip", "filter"})
# Module methods whose result is the module itself (`model = model.to(device)` keeps its identity).
_RETURNS_SELF = frozenset({"to", "cuda", "cpu", "to_empty", "train", "eval", "float", "half", "bfloat16", "requires_grad_", "apply"})
# Module methods whose result iterates sub-modules.
_ITERATES_SUBMODULES = frozenset({"modules", "children", "named_modules", "named_children", "values", "items"})
_PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})
_COLLECTS = frozenset({"append", "extend", "insert", "add"})  # list and set methods that take in elements
# Methods whose result no longer holds a shard of the parameters it came from.
_GATHERS = frozenset({"full_tensor", "to_local", "item", "tolist", "numpy"})
_MAX_INLINE_DEPTH = 4
_MAX_UNROLLED = 16  # a loop over at most this many known values is walked once per value
# Expressions one flow may evaluate, its inlined callees included: past it, the flow's facts are unknown
# (no events), so that no input makes a run take minutes. The largest flow of accelerate's 1,846
# evaluates 77k; nearly all evaluate under 5k.
FLOW_BUDGET = 40_000

GLOBAL_RANK = "global"  # the process's rank among all processes: `RANK`, `dist.get_rank()`
LOCAL_RANK = "local"  # its rank on its own node: `LOCAL_RANK`, `dist.get_node_local_rank()`
SOME_RANK = "some"  # a rank only named as one (`self.rank`, `get_rank()` of a library, `NODE_RANK`): which, unknown
_RANK_VARIABLES = {
    "RANK": GLOBAL_RANK, "SLURM_PROCID": GLOBAL_RANK, "OMPI_COMM_WORLD_RANK": GLOBAL_RANK, "PMI_RANK": GLOBAL_RANK,
    "LOCAL_RANK": LOCAL_RANK, "SLURM_LOCALID": LOCAL_RANK, "OMPI_COMM_WORLD_LOCAL_RANK": LOCAL_RANK, "MPI_LOCALRANKID": LOCAL_RANK,
}
_RANK_CALLS = {"torch.distributed.get_rank": GLOBAL_RANK, "torch.distributed.get_node_local_rank": LOCAL_RANK}
_ENVIRONMENT_READS = frozenset({"os.environ.get", "os.getenv"})
_RANK_CONVERSIONS = frozenset({"int", "str"})  # builtins whose result is still the same rank

SHARD = "shard"  # fully_shard(target) (FSDP2)
WRAP = "wrap"  # FullyShardedDataParallel(target) (FSDP1)
OPTIMIZER = "optimizer"  # an optimizer built over the parameters of `params_of`
METHOD = "method"  # target.method(...)
CALL_VALUE = "call_value"  # target(...): a forward when target is a module
CALL = "call"  # a call of something that is not a local value: qname(args)
META = "meta"  # target was built on the meta device
ASSIGN = "assign"  # `target = ...` where target is an attribute (`model.tok_embeddings = new`)
ENTER = "enter"  # a call of a function of this run, whose events follow inlined: qname(args)

# Where code under a RankGuard sits.
GUARD_BODY = "body"  # the body of `if <rank test>:`
GUARD_ELSE = "else"  # its `else`/`elif` branch
GUARD_AFTER_EXIT = "after-exit"  # the rest of a block after `if not is_main: return` (or `continue`)
GUARD_DECORATED = "decorated"  # the body of a function decorated `@rank_zero_only`


def canonical(qname: str) -> str:
    for prefix, replacement in _CANONICAL_PREFIXES:
        if qname.startswith(prefix):
            return replacement + qname[len(prefix):]
    return qname


def dotted_name(node: cst.CSTNode) -> str | None:
    if type(node) is cst.Name:
        return node.value
    if type(node) is cst.Attribute:
        base = dotted_name(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


# For each branching statement around a node: ((the inlined call's prefix, id of the statement), which arm).
Arms = tuple[tuple[tuple[str, int], int], ...]


@dataclass(frozen=True)
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

    def is_within(self, other: Ref) -> bool:
        """True when self is other or reached from it (`[]` matches any one step)."""
        if self.root != other.root or len(self.path) < len(other.path):
            return False
        return all(mine == theirs or "[]" in (mine, theirs) for mine, theirs in zip(self.path, other.path))


@dataclass(frozen=True)
class Rank:
    """A value that is a process rank (`scope` GLOBAL_RANK, LOCAL_RANK or SOME_RANK), or a string
    formatted from one when `formatted` (`f"cuda:{rank}"`)."""

    scope: str
    formatted: bool = False
    variable: str | None = None  # the environment variable it was read from (`RANK`); None: a call


@dataclass
class Value:
    """What an expression evaluates to, as far as the model cares."""

    ref: Ref | None = None
    params_of: frozenset[Ref] = frozenset()  # parameters of these modules flow into the value
    iterates: Ref | None = None  # iterating the value yields sub-modules of this ref
    event: Event | None = None  # the event that produced the value
    elements: tuple[Value, ...] | None = None  # a tuple or list literal, element by element
    # What iterating the value visits, in order, when known: a literal's elements, `itertools.chain`'s
    # parts one after the other (an element of an iterable part stands for all of it), `enumerate`,
    # `reversed`, `zip` of those.
    visits: tuple[Value, ...] | None = None
    callees: tuple[FunctionInfo, ...] = ()  # calling the value calls one of these functions of the run
    table: tuple[FunctionInfo, ...] = ()  # a dispatch table: a dict whose values are these functions
    rank: Rank | None = None  # the value is (or formats) the process's rank
    constant: str | None = None  # "None", "True" or "False": a literal passed for a parameter
    rank_test: RankTest | None = None  # a condition whose outcome depends on the rank
    always_false: bool = False  # a parameter left at its default `False`/`None`: `if` on it takes no branch


@dataclass(frozen=True)
class RankTest:
    """A condition that depends on the rank.

    `when_true`: where it is true, it is true on some ranks only (`rank == 0`, `is_main_process`).
    `when_false`: where it is false, it is false on some ranks only. `rank == 0` is both;
    `rank == 0 and step % 100 == 0` is only `when_true` (at most steps it is false on every rank).
    """

    when_true: bool
    when_false: bool

    def negated(self) -> RankTest:
        return RankTest(self.when_false, self.when_true)

    @staticmethod
    def combine(operator: str, left: RankTest | None, right: RankTest | None) -> RankTest | None:
        """`left and right` / `left or right`; None for a condition every rank sees alike."""
        left, right = left or RankTest(False, False), right or RankTest(False, False)
        if operator == "and":
            combined = RankTest(left.when_true or right.when_true, left.when_false and right.when_false)
        else:
            combined = RankTest(left.when_true and right.when_true, left.when_false or right.when_false)
        return combined if combined.when_true or combined.when_false else None


@dataclass(frozen=True, eq=False)
class RankGuard:
    """Code under it runs on some ranks only: a branch of an `if` on a rank test, the rest of a block
    after `if not is_main: return`, or a function decorated `@rank_zero_only`."""

    node: cst.CSTNode  # the `if` statement, or the decorated function
    branch: str  # GUARD_BODY, GUARD_ELSE, GUARD_AFTER_EXIT or GUARD_DECORATED
    file: FileModel
    chain: tuple[str, ...]  # the functions from the flow's own down to the one holding the guard

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
        `("is_main", False)`, and the rest of a block after `if rank != 0: return` gives `("rank == 0", True)`."""
        if not type(self.node) is cst.If:
            return self.code(), True
        test, holds = self.node.test, self.branch == GUARD_BODY
        while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            test, holds = test.expression, not holds
        if type(test) is cst.Comparison and len(test.comparisons) == 1 and type(test.comparisons[0].operator) is cst.NotEqual:
            test, holds = test.with_changes(comparisons=[test.comparisons[0].with_changes(operator=cst.Equal())]), not holds
        return " ".join(self.file.module.code_for_node(test).split()), holds


@dataclass
class FunctionInfo:
    file: FileModel
    node: cst.FunctionDef
    name: str
    qualname: str  # `Trainer.save`, `main.inner`
    params: list[str]
    class_name: str | None
    called: bool = False  # some flow in this run calls it (and so inlines it)


@dataclass
class Event:
    kind: str
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
    kwargs: dict[str, Value] = field(default_factory=dict)
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
            yield node, _holds(node.body, inner)

    def branch_of(self, node: cst.If) -> bool | None:
        """Whether the event runs in the body (True) or the `else:` block (False) of `node`; None when
        neither: not under it, in an `elif`, or in a call in its test."""
        for step, inner in self._ifs():
            if step is node:
                if _holds(node.body, inner):
                    return True
                if type(node.orelse) is cst.Else and _holds(node.orelse.body, inner):
                    return False
        return None

    def conditions(self) -> set[tuple[str, bool]]:
        """What holds where the event runs, as (test source, truth): the tests of the `if`s around it
        and the `assert`s before it in the blocks that hold it (`not` folded into the truth)."""
        facts: set[tuple[str, bool]] = set()
        path = self.outer + self.parents + (self.statement,)

        def add(test: cst.CSTNode, truth: bool) -> None:
            while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
                test, truth = test.expression, not truth
            # `a and b` true: both true; `a or b` false: both false.
            if type(test) is cst.BooleanOperation and isinstance(test.operator, cst.And if truth else cst.Or):
                add(test.left, truth)
                add(test.right, truth)
            facts.add((self.file.code(test).strip(), truth))

        for node, in_body in self.branches():
            add(node.test, in_body)
        for position, node in enumerate(path[:-1]):
            inner = path[position + 1]
            for suite in _suites(node):
                statements = _body(suite)
                if any(statement is inner for statement in statements):
                    for statement in statements[:[id(s) for s in statements].index(id(inner))]:
                        if type(statement) is cst.SimpleStatementLine:
                            for small in statement.body:
                                if type(small) is cst.Assert:
                                    add(small.test, True)
        return facts

    def exclusive(self, other: Event) -> bool:
        """The two sit in different arms of one branching statement (`if`/`elif`/`else`, the rest of a
        block after `if ...: return`, `match` cases, `except` handlers and `else`, a dispatch table's
        entries): they never run in one pass, and neither is before the other."""
        if not self.arms or not other.arms:
            return False
        mine = dict(self.arms)
        return any(mine.get(branching, arm) != arm for branching, arm in other.arms)

    def excludes(self, other: Event) -> bool:
        """The two never run in one execution: they are `exclusive`, or one needs a test true that the
        other needs false (`if args.fsdp: model = FSDP(model)` and `assert not args.fsdp; scaler = GradScaler()`)."""
        if self.exclusive(other):
            return True
        mine = self.conditions()
        return any((test, not truth) in mine for test, truth in other.conditions())

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


@dataclass
class FileModel:
    source: SourceFile
    module: cst.Module
    module_name: str
    imports: dict[str, str] = field(default_factory=dict)
    star_imports: list[str] = field(default_factory=list)
    functions: dict[str, FunctionInfo] = field(default_factory=dict)  # by qualname
    # `self.X = Y(...)` in any class: the last name of each Y assigned to attribute X
    attribute_types: dict[str, set[str]] = field(default_factory=dict)
    _positions: object = None

    @property
    def display(self) -> str:
        return self.source.display

    def qualify(self, node: cst.CSTNode) -> str | None:
        """The canonical qualified name of an imported name or attribute chain, else None."""
        name = dotted_name(node)
        if not name:
            return None
        head, _, rest = name.partition(".")
        if head in self.imports:
            return canonical(self.imports[head] + ("." + rest if rest else ""))
        for module in self.star_imports:
            if module.startswith("torch.distributed"):
                return canonical(f"{module}.{name}")
        return None

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def position(self, node: cst.CSTNode) -> CodeRange:
        # Positions are resolved only for files that have a finding, by PositionProvider's own codegen
        # pass: MetadataWrapper.resolve adds a full visit of the tree for batchable providers even when
        # none is asked for, which doubled the cost of a 1,000-line file's positions.
        if self._positions is None:
            provider = PositionProvider()
            provider._gen_impl(self.module)
            self._positions = provider._computed
        return self._positions[node]


def build_file_model(source: SourceFile, module: cst.Module) -> FileModel:
    model = FileModel(source=source, module=module, module_name=module_name_for(source.path))
    _FileIndexer(model).index(module.body)
    return model


class _FileIndexer:
    """One pass over a file's statements (never its expressions): imports, functions, classes and
    the attributes classes assign. LibCST's generic visitor rebuilds every node and costs ~30x more."""

    def __init__(self, model: FileModel) -> None:
        self.model = model
        self.scopes: list[tuple[str, str]] = []  # ("class"|"def", name)

    def index(self, statements) -> None:
        for statement in statements:
            if type(statement) is cst.SimpleStatementLine:
                for small in statement.body:
                    if type(small) is cst.Import:
                        self.import_(small)
                    elif type(small) is cst.ImportFrom:
                        self.import_from(small)
                    elif type(small) is cst.Assign:
                        self.assign(small)
            elif type(statement) is cst.ClassDef:
                self.scopes.append(("class", statement.name.value))
                self.index(_body(statement.body))
                self.scopes.pop()
            elif type(statement) is cst.FunctionDef:
                self.function(statement)
                self.scopes.append(("def", statement.name.value))
                self.index(_body(statement.body))
                self.scopes.pop()
            else:  # if/for/while/with/try/match: imports and definitions inside them count too
                for suite in _suites(statement):
                    self.index(_body(suite))

    def import_(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted_name(alias.name)
            if not full:
                continue
            if alias.asname and type(alias.asname.name) is cst.Name:
                self.model.imports[alias.asname.name.value] = full
            else:
                head = full.split(".")[0]
                self.model.imports.setdefault(head, head)

    def import_from(self, node: cst.ImportFrom) -> None:
        base = dotted_name(node.module) if node.module else ""
        base = "." * len(node.relative) + (base or "")
        if type(node.names) is cst.ImportStar:
            self.model.star_imports.append(canonical(base))
            return
        for alias in node.names:
            name = dotted_name(alias.name)
            if not name:
                continue
            local = alias.asname.name.value if alias.asname and type(alias.asname.name) is cst.Name else name
            separator = "" if base.endswith(".") else "."
            self.model.imports[local] = canonical(f"{base}{separator}{name}")

    def function(self, node: cst.FunctionDef) -> None:
        qualname = ".".join([name for _, name in self.scopes] + [node.name.value])
        class_name = self.scopes[-1][1] if self.scopes and self.scopes[-1][0] == "class" else None
        params = [p.name.value for p in (*node.params.posonly_params, *node.params.params, *node.params.kwonly_params)]
        self.model.functions[qualname] = FunctionInfo(
            file=self.model, node=node, name=node.name.value, qualname=qualname, params=params, class_name=class_name
        )

    def assign(self, node: cst.Assign) -> None:
        if type(node.value) is cst.Call:
            callee = (dotted_name(node.value.func) or "?").rsplit(".", 1)[-1]
            for target in node.targets:
                if type(target.target) is cst.Attribute:
                    self.model.attribute_types.setdefault(target.target.attr.value, set()).add(callee)


def _body(suite: cst.CSTNode) -> list[cst.CSTNode]:
    return list(suite.body) if type(suite) is cst.IndentedBlock else [cst.SimpleStatementLine(suite.body)] if type(suite) is cst.SimpleStatementSuite else []


def _suites(statement: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The blocks of a compound statement, in order."""
    if type(statement) is cst.If:
        yield statement.body
        if type(statement.orelse) is cst.If:
            yield from _suites(statement.orelse)
        elif statement.orelse is not None:
            yield statement.orelse.body
    elif type(statement) in (cst.For, cst.While):
        yield statement.body
        if statement.orelse is not None:
            yield statement.orelse.body
    elif type(statement) is cst.With:
        yield statement.body
    elif type(statement) in (cst.Try, cst.TryStar):
        yield statement.body
        for handler in statement.handlers:
            yield handler.body
        if statement.orelse is not None:
            yield statement.orelse.body
        if statement.finalbody is not None:
            yield statement.finalbody.body
    elif type(statement) is cst.Match:
        for case in statement.cases:
            yield case.body


class Flow:
    """The ordered events of one function (or module body), callees inlined."""

    def __init__(self, program: Program, file: FileModel, function: FunctionInfo | None) -> None:
        self.program = program
        self.file = file
        self.function = function
        self.events: list[Event] = []
        self.parameter_roots: set[str] = set(function.params) if function else set()
        self.assigned_roots: set[str] = set()
        self.optimizer_bindings: set[Ref] = set()
        self.bindings: dict[Ref, list[Event]] = {}  # variable -> the events whose result was assigned to it
        self.returned = Value()
        # root -> qualified name of the call that built it (`torch.nn.Linear`)
        self.constructed: dict[str, str] = {}
        # root -> roots of the values it was computed from (`module = get_module(model, path)`)
        self.derived_from: dict[str, set[str]] = {}
        self._by_kind: dict[str, list[Event]] = {}  # the events, by kind, up to _indexed
        self._indexed = 0
        self.steps = 0  # expressions evaluated, against FLOW_BUDGET
        self.versions = 0  # bindings that made a new value of a name (`model#3`)
        self.exhausted = False  # the budget ran out: the flow holds no events

    @property
    def is_entry(self) -> bool:
        """No flow of this run calls it: nothing outside it can have shaped its values."""
        return self.function is None or not self.function.called

    def has_local_provenance(self, ref: Ref) -> bool:
        """The value was made inside this flow (not a parameter, global or attribute of self)."""
        return ref.root in self.assigned_roots and ref.root not in self.parameter_roots

    def of_kind(self, *kinds: str) -> Iterator[Event]:
        """The events of these kinds, in order: rules ask this of every flow, most for a rare kind."""
        for event in self.events[self._indexed:]:  # emitted since the last call
            self._by_kind.setdefault(event.kind, []).append(event)
        self._indexed = len(self.events)
        lists = [self._by_kind.get(kind, []) for kind in kinds]
        return iter(lists[0]) if len(lists) == 1 else heapq.merge(*lists, key=lambda event: event.index)

    def shard_events(self, fsdp: int | None = None) -> Iterator[Event]:
        kinds = {2: (SHARD,), 1: (WRAP,), None: (SHARD, WRAP)}[fsdp]
        return self.of_kind(*kinds)

    def sharding_of(self, ref: Ref, before: int, fsdp: int | None = 2) -> Event | None:
        """The last shard event that manages `ref` (it or a module it lives in) before event `before`.

        With `fsdp=1` or `2`, only when every event that manages it is of that FSDP: a module that both
        `fully_shard` and `FullyShardedDataParallel` reach (`if use_fsdp2: fully_shard(model) else:
        model = FSDP(model)`) is of neither, since which one runs is not known. Falls back to what
        other methods of the same class shard on `self`.
        """
        at = self.events[before] if before < len(self.events) else None
        managing = [event for event in itertools.takewhile(lambda event: event.index < before, self.of_kind(SHARD, WRAP))
                    if any(ref.is_within(target) for target in event.targets) and not (at and event.exclusive(at))]
        if not managing and ref.root == "self" and self.function and self.function.class_name:
            managing = [event for event in self.program.class_shards.get((self.file.module_name, self.function.class_name), ())
                        if any(ref.is_within(target) for target in event.targets)]
        if fsdp is not None and {event.kind for event in managing} != {SHARD if fsdp == 2 else WRAP}:
            return None
        return managing[-1] if managing else None

    def isinstance_known(self, event: Event, ref: Ref, classes: tuple[str, ...]) -> bool | None:
        """Whether `ref` (or a module holding it) is an instance of one of `classes` (qualified names)
        where `event` runs, as the `if isinstance(...)` tests around it say: True, False, or None."""
        tests = {id(e.node): e for e in self.events if e.kind == CALL and e.qname == "isinstance" and len(e.args) == 2}
        for node, in_body in event.branches():
            test, holds = node.test, in_body
            if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
                test, holds = test.expression, not holds
            check = tests.get(id(test))
            if check is None or check.args[0].ref is None or not ref.is_within(check.args[0].ref):
                continue
            kinds = check.node.args[1].value
            names = [element.value for element in kinds.elements] if type(kinds) is cst.Tuple else [kinds]
            if any(self.file.qualify(name) in classes or check.file.qualify(name) in classes for name in names):
                return holds
        return None

    def escapes(self, ref: Ref, start: int = 0, end: int | None = None) -> bool:
        """`ref` was handed to a function this run cannot see, between events `start` and `end`
        (builtins such as `print` or `isinstance` do not count)."""
        for event in self.events[start:end]:
            if event.kind == CALL and not (event.qname or "").startswith("torch.") and event.qname not in _BUILTINS:
                if any(arg.root == ref.root for arg in event.arg_refs()):
                    return True
        return False

    def origin(self, value: Value, before: int) -> Event | None:
        """The event that made `value`: its own, or the last one assigned to its variable before event
        `before` (`options = StateDictOptions(...)`, `state = torch.load(path)`)."""
        if value.event is not None:
            return value.event
        if value.ref is None:
            return None
        # By the index of bindings: scanning the events back cost 90 % of a run on accelerate.
        at = self.events[before] if before < len(self.events) else None
        made = [event for event in self.bindings.get(Ref(value.ref.root), ()) if 0 <= event.index < before and not (at and event.exclusive(at))]
        return max(made, key=lambda event: event.index, default=None)

    def state_dict_options(self, event: Event) -> frozenset[str]:
        """The `StateDictOptions` fields set to True in the `options=` of a state-dict helper call."""
        options = event.kwargs.get("options")
        made_by = self.origin(options, event.index) if options is not None else None
        if made_by is None or made_by.kind != CALL or not (made_by.qname or "").endswith("StateDictOptions"):
            return frozenset()
        return made_by.keywords_set_true()

    def collective(self, event: Event) -> str | None:
        """The name of the collective `event` is (every rank of the group must reach it), else None.

        Process-group collectives, `dcp.save/load/async_save`, the state-dict helpers with a full state
        dict, `DTensor.full_tensor()`, FSDP1's `summon_full_params`/`full_optim_state_dict` and its
        `state_dict()` under FULL_STATE_DICT (its default), `unshard()` and a forward of a sharded module.
        """
        if event.kind == CALL and event.qname:
            name = event.qname.rsplit(".", 1)[-1]
            if distributed.is_process_group_collective(event.qname) or distributed.is_dcp_collective(event.qname) or distributed.is_fsdp1_collective(event.qname):
                return name
            if distributed.is_state_dict_helper(event.qname) and self.state_dict_options(event) & distributed.COLLECTIVE_STATE_DICT_OPTIONS:
                return name
            return None
        if event.kind == METHOD and event.target is not None:
            if event.method in ("full_tensor", "summon_full_params"):
                return event.method
            if event.method == "unshard" and self.sharding_of(event.target, event.index, fsdp=2):
                return event.method
            if event.method == "state_dict" and self.sharding_of(event.target, event.index, fsdp=1) and self._fsdp1_full_state_dict(event):
                return event.method
            return None
        if event.kind == CALL_VALUE and event.target is not None and self.sharding_of(event.target, event.index, fsdp=None):
            return "forward"
        return None

    def _fsdp1_full_state_dict(self, event: Event) -> bool:
        """FSDP1's `state_dict()` gathers unless a `state_dict_type` context (or an earlier
        `set_state_dict_type`) chose a sharded or local state dict."""
        chosen = [context for context in event.contexts if (context.qname or context.method or "").endswith("state_dict_type")]
        chosen = chosen or [e for e in self.events[:event.index] if (e.qname or e.method or "").endswith("set_state_dict_type")]
        return not chosen or "FULL_STATE_DICT" in chosen[-1].file.code(chosen[-1].node)


class Program:
    """Every parsed file of the run and the flows built from them."""

    def __init__(self, files: list[FileModel]) -> None:
        self.files = files
        self._call_ids = itertools.count(1)
        self.functions_by_name: dict[str, list[FunctionInfo]] = {}
        self._bound_counts: dict[int, tuple[cst.CSTNode, Counter[str]]] = {}
        for file in files:
            for function in file.functions.values():
                self.functions_by_name.setdefault(function.name, []).append(function)
        # Functions before module bodies: when two flows report one node, the first (and shortest
        # "via" chain) is kept.
        self.flows = [self._build_flow(file, function) for file in files for function in file.functions.values()]
        self.flows += [self._build_flow(file, None) for file in files]
        # Modules a class shards on `self` in any of its methods, for its other methods.
        self.class_shards: dict[tuple[str, str], list[Event]] = {}
        for flow in self.flows:
            if flow.function and flow.function.class_name:
                key = (flow.file.module_name, flow.function.class_name)
                for event in flow.shard_events():
                    if any(target.root == "self" for target in event.targets):
                        self.class_shards.setdefault(key, []).append(event)

    def _build_flow(self, file: FileModel, function: FunctionInfo | None) -> Flow:
        flow = Flow(self, file, function)
        walker = _Walker(flow, file, function, env={}, prefix="", chain=(function.name,) if function else ("<module>",), depth=0)
        body = function.node.body if function else file.module
        try:
            walker.walk_suite(body, ())
        except _BudgetExhausted:
            unknown = Flow(self, file, function)
            unknown.exhausted = True
            return unknown
        flow.returned = walker.returned
        return flow

    @property
    def exhausted_flows(self) -> list[Flow]:
        return [flow for flow in self.flows if flow.exhausted]

    def only(self, file: FileModel) -> Program:
        """This program seen from one file: its flows only (callees from other files stay inlined)."""
        view = copy.copy(self)
        view.files = [file]
        view.flows = [flow for flow in self.flows if flow.file is file]
        return view

    def next_call_id(self) -> int:
        return next(self._call_ids)

    def bound_counts(self, file: FileModel, function: FunctionInfo | None) -> Counter[str]:
        """How many statements of the function (or module) body bind each name, counted once per body."""
        owner = function.node if function else file.module
        if id(owner) not in self._bound_counts:
            body = _body(owner.body) if function else list(owner.body)
            self._bound_counts[id(owner)] = (owner, Counter(_bound_names(body)))  # the node kept: its id stays its own
        return self._bound_counts[id(owner)][1]

    def resolve_function(self, file: FileModel, caller: FunctionInfo | None, call: cst.Call) -> FunctionInfo | None:
        """The function of this run a call reaches: nested, same class, same file, imported, or unique."""
        return self.resolve_callable(file, caller, call.func)

    def resolve_callable(self, file: FileModel, caller: FunctionInfo | None, func: cst.CSTNode) -> FunctionInfo | None:
        """The function of this run a name or attribute refers to, as `resolve_function` finds it."""
        if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
            if caller and caller.class_name:
                return file.functions.get(f"{caller.class_name}.{func.attr.value}")
            return None
        if type(func) is cst.Name:
            name = func.value
            if caller and f"{caller.qualname}.{name}" in file.functions:
                return file.functions[f"{caller.qualname}.{name}"]
            if name in file.functions:
                return file.functions[name]
            qualified = file.imports.get(name)
            if qualified is None:
                return None
            return self._lookup_qualified(qualified)
        qualified = file.qualify(func)
        return self._lookup_qualified(qualified) if qualified else None

    def _lookup_qualified(self, qualified: str) -> FunctionInfo | None:
        if qualified.startswith("torch."):
            return None  # torch's own (`torch.distributed.get_rank`), never a function of the checked files
        module, _, name = qualified.rpartition(".")
        candidates = [f for f in self.functions_by_name.get(name, ()) if f.qualname == name]
        relative = module.startswith(".")
        module = module.lstrip(".")
        same_module = [f for f in candidates if module and (f.file.module_name == module or f.file.module_name.endswith("." + module) or module.endswith("." + f.file.module_name) or f.file.module_name.split(".")[-1] == module.split(".")[-1])]
        if len(same_module) == 1:
            return same_module[0]
        if len(candidates) != 1:
            return None
        # The only function of that name, re-exported by a package (`from mypkg import f`, defined in
        # mypkg/core.py): only where the import names one of its folders. `from setuptools import
        # setup` in setup.py is not fms-fsdp's own `setup()`, which starts a process group.
        (candidate,) = candidates
        return candidate if relative or module.split(".")[0] in Path(candidate.file.source.path).resolve().parts else None


class _BudgetExhausted(Exception):
    """A flow evaluated more than FLOW_BUDGET expressions."""


class _Walker:
    """Walks one function body in textual order, appending events to the flow, inlining callees."""

    def __init__(self, flow: Flow, file: FileModel, function: FunctionInfo | None, env: dict[str, Value], prefix: str, chain: tuple[str, ...], depth: int, stack: tuple[int, ...] = (),
                 outer: tuple[cst.CSTNode, ...] = (), rank_guards: tuple[RankGuard, ...] = (), call_sites: tuple[cst.Call, ...] = (),
                 contexts: tuple[Event, ...] = (), arms: Arms = ()) -> None:
        self.flow = flow
        self.file = file
        self.function = function
        self.env = env  # names and `self.x` chains -> values
        self.prefix = prefix
        self.chain = chain
        self.depth = depth
        self.stack = stack + ((id(function.node),) if function else ())
        self.returned = Value()
        self.meta_depth = 0
        self.outer = outer  # statements around the call sites that led here (Event.outer)
        # What holds for every event of this walk, the caller's included (see Event).
        self.rank_guards = rank_guards
        self.call_sites = call_sites
        self.contexts = contexts
        self.arms = arms
        self.passes = ""  # the unrolled loop passes the walk is in (`/0/2`), for arm_key
        # In a decorator's wrapper: the decorated call's arguments, and the function it decorates.
        self.forwarded: tuple[tuple[Value, ...], dict[str, Value]] | None = None
        self.forwarded_to: FunctionInfo | None = None
        if function is not None and any(_decorator_name(d) in distributed.MAIN_PROCESS_DECORATORS for d in function.node.decorators):
            self.rank_guards += (RankGuard(function.node, GUARD_DECORATED, file, chain),)

    @contextmanager
    def guarded(self, node: cst.CSTNode, branch: str, test: RankTest | None, applies: bool) -> Iterator[None]:
        """Events emitted inside run under a RankGuard when `test` says the branch is rank-dependent."""
        saved = self.rank_guards
        if test is not None and applies:
            self.rank_guards += (RankGuard(node, branch, self.file, self.chain),)
        try:
            yield
        finally:
            self.rank_guards = saved

    # statements

    @contextmanager
    def arm(self, branching: cst.CSTNode, number: int) -> Iterator[None]:
        """Events emitted inside run in arm `number` of the branching statement (Event.arms)."""
        saved = self.arms
        self.arms += ((self.arm_key(branching), number),)
        try:
            yield
        finally:
            self.arms = saved

    def arm_key(self, branching: cst.CSTNode) -> tuple[str, int]:
        """One branching statement in one pass: each inlined call and each unrolled loop pass is its own."""
        return self.prefix + self.passes, id(branching)

    def branches(self, branching: cst.CSTNode, arms: Iterable[tuple[Callable[[], None], bool]]) -> None:
        """Walks the exclusive arms of `branching` in order, each from the same bindings (each arm a
        `walk` and whether it exits the block), then joins what the arms that fall through bound."""
        start, reaching = self.env, []
        for number, (walk, exits) in enumerate(arms):
            self.env = dict(start)
            with self.arm(branching, number):
                walk()
            if not exits:
                reaching.append(self.env)
        self.env = self.join(reaching) if reaching else start

    def join(self, envs: list[dict[str, Value]]) -> dict[str, Value]:
        """The bindings where paths meet: a name bound to different objects on the paths (a new
        `model` built in one arm of an `if`) is a new value there, of which nothing is known."""
        if len(envs) == 1:
            return envs[0]
        joined = dict(envs[-1])
        for key in set().union(*envs):
            values = [env[key] for env in envs if key in env]
            if all(value is values[0] for value in values):
                joined[key] = values[0]
                continue
            refs = {value.ref for value in values}
            if len(refs) == 1:
                continue  # the same object on every path (`model = FSDP(model)` in one arm): the last arm's value
            ranks, tests = {value.rank for value in values}, {value.rank_test for value in values}
            ref = Ref(self.new_version(key)) if "." not in key else None
            if ref is None:
                del joined[key]  # `self.x`: read again as the attribute itself
                continue
            joined[key] = Value(ref=ref, rank=ranks.pop() if len(ranks) == 1 else None, rank_test=tests.pop() if len(tests) == 1 else None)
        return joined

    def new_version(self, name: str) -> str:
        self.flow.versions += 1
        return f"{self.prefix}{name}#{self.flow.versions}"

    def walk_suite(self, suite: cst.CSTNode, parents: tuple[cst.CSTNode, ...]) -> None:
        if type(suite) in (cst.Module, cst.IndentedBlock):
            saved, saved_arms = self.rank_guards, self.arms
            for statement in suite.body:
                test = self.statement(statement, parents)
                if type(statement) is not cst.If:
                    continue
                # `if not is_main: return`: the rest of the block runs where the test is false.
                if test is not None and test.when_false and statement.orelse is None and _exits_block(statement.body):
                    self.rank_guards += (RankGuard(statement, GUARD_AFTER_EXIT, self.file, self.chain),)
                # ... and in the `else` arm of that `if` (or its body, when its `else` is what exits)
                body_exits, else_exits = _exits_block(statement.body), _else_exits(statement)
                if body_exits != else_exits:
                    self.arms += ((self.arm_key(statement), 0 if else_exits else 1),)
            self.rank_guards, self.arms = saved, saved_arms
        elif type(suite) is cst.SimpleStatementSuite:
            # `if x: a(); b()`: the compound statement holds them; `def f(): a()`: the def itself.
            holder, outer = (parents[-1], parents[:-1]) if parents else (self.function.node, ())
            for small in suite.body:
                self.small_statement(small, holder, outer)

    def statement(self, node: cst.CSTNode, parents: tuple[cst.CSTNode, ...]) -> RankTest | None:
        """Walks one statement; for an `if`, returns its test's dependence on the rank."""
        inner = parents + (node,)
        if type(node) is cst.SimpleStatementLine:
            for small in node.body:
                self.small_statement(small, node, parents)
        elif type(node) is cst.If:
            value = self.expr(node.test, node, parents)
            truth = False if value.always_false else self.static_truth(node.test)
            test = value.rank_test

            def body() -> None:
                with self.guarded(node, GUARD_BODY, test, bool(test and test.when_true)):
                    self.walk_suite(node.body, inner)

            def orelse() -> None:
                if node.orelse is None:
                    return
                with self.guarded(node, GUARD_ELSE, test, bool(test and test.when_false)):
                    if type(node.orelse) is cst.If:
                        self.statement(node.orelse, parents)
                    else:
                        self.walk_suite(node.orelse.body, inner)

            # A test known true or false takes one arm; a path that ends in its arm (`return`, `raise`)
            # brings nothing to what follows.
            self.branches(node, [(body if truth is not False else _nothing, _exits_block(node.body) and truth is not False),
                                 (orelse if truth is not True else _nothing, _else_exits(node) and truth is not True)])
            return test
        elif type(node) is cst.For:
            iterable = self.expr(node.iter, node, parents)
            if iterable.visits and len(iterable.visits) <= _MAX_UNROLLED:
                # `for module in (*model.layers, model)`: each value in turn, in order.
                passes = self.passes
                for number, visit in enumerate(iterable.visits):
                    self.passes = f"{passes}/{number}"
                    self.bind(node.target, visit)
                    self.walk_suite(node.body, inner)
                self.passes = passes
                if node.orelse:
                    self.walk_suite(node.orelse.body, inner)
                return None
            element = self.element_of(iterable)
            before = self.env
            self.env = dict(before)
            self.bind(node.target, element)
            if element.ref is None and type(node.target) is cst.Name and self.env[node.target.value].ref is not None:
                # `for module in children_bottom_up(model)[:-1]`: each element comes from `model`.
                self.flow.derived_from[self.env[node.target.value].ref.root] = self.roots_read(node.iter)
            self.walk_suite(node.body, inner)
            self.env = self.join([before, self.env])  # the body may run no time
            if node.orelse:
                self.walk_suite(node.orelse.body, inner)
        elif type(node) is cst.While:
            self.expr(node.test, node, parents)
            before = self.env
            self.env = dict(before)
            self.walk_suite(node.body, inner)
            self.env = self.join([before, self.env])
        elif type(node) is cst.With:
            meta = 0
            saved_contexts = self.contexts
            for item in node.items:
                value = self.expr(item.item, node, parents, with_item=True)
                meta += self.is_meta_device(item.item)
                if value.event is not None:
                    self.contexts += (value.event,)
                if item.asname:
                    self.bind(item.asname.name, value)
            self.meta_depth += meta
            self.walk_suite(node.body, inner)
            self.meta_depth -= meta
            self.contexts = saved_contexts
        elif type(node) in (cst.Try, cst.TryStar):
            # A handler runs after part of the body: it is no arm apart from the body, only from the
            # other handlers and the `else`.
            self.walk_suite(node.body, inner)
            arms = [(lambda handler=handler: self.walk_suite(handler.body, inner), _exits_block(handler.body)) for handler in node.handlers]
            self.branches(node, arms + [(lambda: self.walk_suite(node.orelse.body, inner) if node.orelse else None, False)])
            if node.finalbody:
                self.walk_suite(node.finalbody.body, inner)
        elif type(node) is cst.Match:
            self.expr(node.subject, node, parents)
            # Without a catch-all case, no case may match: a last arm that does nothing.
            self.branches(node, [(lambda case=case: self.walk_suite(case.body, inner), _exits_block(case.body)) for case in node.cases] + [(_nothing, False)])

    def static_truth(self, test: cst.CSTNode) -> bool | None:
        """The value of an `if` test on a name known to hold a literal (a parameter the call passed
        `scaler=None` for, or `scaler = None` assigned once): `if scaler is not None:` is dead."""
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            inner = self.static_truth(test.expression)
            return None if inner is None else not inner
        if type(test) is cst.Comparison and len(test.comparisons) == 1:
            comparison = test.comparisons[0]
            if type(comparison.comparator) is cst.Name and comparison.comparator.value == "None":
                known = self.parameter_constant(test.left)
                if known is not None and type(comparison.operator) in (cst.Is, cst.IsNot):
                    return (known == "None") == type(comparison.operator) is cst.Is
            return None
        known = self.parameter_constant(test)
        return None if known is None else known == "True"

    def parameter_constant(self, node: cst.CSTNode) -> str | None:
        """The literal a parameter was passed, or a name assigned once was given."""
        if not type(node) is cst.Name:
            return None
        value = self.env.get(node.value)
        return value.constant if value is not None else None

    def assigned_once(self, name: str) -> bool:
        """Whether the function (or module) body binds `name` in one statement only."""
        return self.flow.program.bound_counts(self.file, self.function)[name] == 1

    def small_statement(self, node: cst.CSTNode, statement: cst.CSTNode, parents: tuple[cst.CSTNode, ...]) -> None:
        if type(node) is cst.Expr:
            self.expr(node.value, statement, parents)
        elif type(node) is cst.Assign:
            value = self.expr(node.value, statement, parents)
            for target in node.targets:
                self.bind(target.target, value, statement, parents, node.value)
        elif type(node) is cst.AnnAssign and node.value is not None:
            self.bind(node.target, self.expr(node.value, statement, parents), statement, parents, node.value)
        elif type(node) is cst.AugAssign:
            self.expr(node.value, statement, parents)
        elif type(node) is cst.Return and node.value is not None:
            self.returned = self.expr(node.value, statement, parents)
        elif type(node) in (cst.Raise, cst.Assert):
            for child in node.children:
                self.expr(child, statement, parents)

    def bind(self, target: cst.CSTNode, value: Value, statement: cst.CSTNode | None = None, parents: tuple = (),
             source: cst.CSTNode | None = None) -> None:
        """Binds `target` to `value`, the result of expression `source` when an assignment's."""
        if type(target) in (cst.Tuple, cst.List):
            elements = [element.value for element in target.elements]
            if value.elements is not None and len(value.elements) == len(elements):
                for element, element_value in zip(elements, value.elements):
                    self.bind(element, element_value, statement, parents, source)
                return
            # `for name, module in ...` / `for i, layer in enumerate(...)`: the last name is the element.
            for position, element in enumerate(elements):
                last = position == len(elements) - 1
                self.bind(element, value if last and (value.ref or value.params_of) else Value(), statement, parents, source)
            return
        if type(target) in (cst.Attribute, cst.Subscript) and statement is not None:
            assigned = self.ref_of(target)
            if assigned is not None:  # `model.tok_embeddings = new`: a sub-module replaced
                self.emit(ASSIGN, target, statement, parents, targets=(assigned,))
        key = dotted_name(target)
        if key is None:
            return
        if value.ref is not None:
            bound = value
        else:
            root = None
            if type(target) is cst.Name:
                root = self.new_version(key) if self.rebinds(key, source) else self.prefix + key
            ref = Ref(root) if root else self.ref_of(target)
            if root:
                self.flow.assigned_roots.add(root)
                self.record_origin(root, value.event)
            # A literal kept only for a name assigned once: another assignment, later in a loop, could
            # change it before a test that comes earlier in the text.
            constant = value.constant if root and value.constant and self.assigned_once(key) else None
            bound = Value(ref=ref, params_of=value.params_of, iterates=value.iterates, elements=value.elements, rank=value.rank,
                          constant=constant, rank_test=value.rank_test, visits=value.visits, callees=value.callees, table=value.table)
        self.env[key] = bound
        if value.event is not None and value.event.binding is None:
            value.event.binding = bound.ref
            self.flow.bindings.setdefault(bound.ref, []).append(value.event)
            if value.event.kind in (SHARD, WRAP) and not value.event.targets and bound.ref:
                value.event.targets = (bound.ref,)  # `model = FSDP(Model(...))`: the wrapped module is the result
                if value.event.args and not bound.ref.path:
                    self.record_origin(bound.ref.root, value.event.args[0].event)
            if value.event.kind == OPTIMIZER and bound.ref:
                self.flow.optimizer_bindings.add(bound.ref)
        if statement is not None and bound.ref is not None and (self.meta_depth or value.event and value.event.kind == META):
            self.emit(META, target, statement, parents, targets=(bound.ref,))

    def rebinds(self, name: str, source: cst.CSTNode | None) -> bool:
        """Whether binding `name` makes a new object of it: it was bound before (or is a parameter) and
        the new value is not computed from the old (`model = nn.Sequential(...)`, not `model = wrap(model)`)."""
        previous = self.env.get(name)
        if previous is None:
            return self.depth == 0 and self.function is not None and name in self.function.params
        return previous.ref is None or source is None or previous.ref.root not in self.roots_read(source)

    def record_origin(self, root: str, event: Event | None) -> None:
        if event is None or event.kind not in (CALL, METHOD, CALL_VALUE):
            return
        if event.kind == CALL and event.qname in ("copy.deepcopy", "copy.copy") and event.args and event.args[0].ref:
            # A copy is built by what built the original.
            built_by = self.flow.constructed.get(event.args[0].ref.root)
            if built_by:
                self.flow.constructed[root] = built_by
        elif event.kind == CALL and event.qname:
            self.flow.constructed[root] = event.qname
        # `get_module(model, path)`, `model.get_submodule(path)`; and, for a call written here (not one
        # returned by an inlined function, whose names are the callee's), `getattr(model, "embed")()`.
        sources = {ref.root for ref in event.arg_refs()} | ({event.target.root} if event.kind == METHOD and event.target else set())
        if event.chain == self.chain:
            sources |= self.roots_read(event.node) - {root}
        if sources:
            self.flow.derived_from[root] = sources

    # expressions

    def roots_read(self, node: cst.CSTNode) -> set[str]:
        """The roots of the tracked values an expression reads, without evaluating it again."""
        roots: set[str] = set()
        pending = [node]
        while pending:
            node = pending.pop()
            if type(node) in (cst.Name, cst.Attribute):
                ref = self.ref_of(node)
                if ref is not None:
                    roots.add(ref.root)
                elif type(node) is cst.Attribute:
                    pending.append(node.value)
            elif type(node) is cst.Call:
                pending += [node.func, *(arg.value for arg in node.args)]
            elif type(node) is cst.Subscript:
                pending.append(node.value)
            elif not type(node) in (cst.Lambda, cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp):
                pending += _subexpressions(node)
        return roots

    def ref_of(self, node: cst.CSTNode) -> Ref | None:
        key = dotted_name(node)
        if key is not None and key in self.env:
            return self.env[key].ref
        if type(node) is cst.Name:
            name = node.value
            if name in self.file.imports or name in _BUILTINS or name in self.file.functions:
                return None
            return Ref(self.prefix + name)
        if type(node) is cst.Attribute:
            base = self.ref_of(node.value)
            return base.child(node.attr.value) if base else None
        if type(node) is cst.Subscript:
            base = self.ref_of(node.value)
            return base.child("[]") if base else None
        return None

    def element_of(self, iterable: Value) -> Value:
        """An element of what `iterable` iterates: a sub-module, or a parameter of the modules whose
        parameters it holds (`p` in `model.parameters()`)."""
        source = iterable.iterates or iterable.ref
        return Value(ref=source.child("[]") if source else None, params_of=iterable.params_of)

    def expr(self, node: cst.CSTNode, statement: cst.CSTNode, parents: tuple, with_item: bool = False) -> Value:
        self.flow.steps += 1
        if self.flow.steps > FLOW_BUDGET:
            raise _BudgetExhausted
        if type(node) is cst.Name and node.value in _CONSTANTS:
            return Value(constant=node.value)
        if type(node) in (cst.Name, cst.Attribute):
            key = dotted_name(node)
            if key is not None and key in self.env:
                return self.env[key]
            if type(node) is cst.Attribute:
                self.expr(node.value, statement, parents)
            # An unassigned name or attribute says by its name whether it is a rank (`self.global_rank`).
            name = node.value if type(node) is cst.Name else node.attr.value
            if type(node) is cst.Name and (name in self.file.functions or name in self.file.imports):
                function = self.flow.program.resolve_callable(self.file, self.function, node)
                if function is not None:
                    return Value(callees=(function,))
            flag = distributed.is_main_process_flag(name)
            return Value(ref=self.ref_of(node), rank=Rank(SOME_RANK) if distributed.is_rank_name(name) else None,
                         rank_test=RankTest(True, True) if flag else None)
        if type(node) is cst.Subscript:
            base = self.expr(node.value, statement, parents)
            for element in node.slice:
                self.expr(element, statement, parents)
            index = node.slice[0].slice if len(node.slice) == 1 else None
            if type(index) is cst.Index and self.file.qualify(node.value) == "os.environ":  # os.environ["LOCAL_RANK"]
                return Value(rank=_rank_variable(index.value))
            return Value(ref=base.ref.child("[]") if base.ref else None, callees=base.table)
        if type(node) is cst.Call:
            return self.call(node, statement, parents, with_item)
        if type(node) in (cst.Lambda, cst.FunctionDef, cst.ClassDef):
            return Value()
        if type(node) in (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp):
            return self.comprehension(node, statement, parents)
        if type(node) is cst.Comparison:
            return self.comparison(node, statement, parents)
        if type(node) is cst.BooleanOperation:
            left, right = self.expr(node.left, statement, parents), self.expr(node.right, statement, parents)
            operator = "and" if type(node.operator) is cst.And else "or"
            return Value(params_of=left.params_of | right.params_of, rank_test=RankTest.combine(operator, left.rank_test, right.rank_test))
        if type(node) is cst.UnaryOperation and type(node.operator) is cst.Not:
            operand = self.expr(node.expression, statement, parents)
            return Value(rank_test=operand.rank_test.negated() if operand.rank_test else None)
        if type(node) in (cst.Tuple, cst.List):
            elements = tuple(self.expr(element.value, statement, parents) for element in node.elements)
            params = frozenset().union(*(element.params_of for element in elements))
            visits = tuple(self.element_of(value) if type(element) is cst.StarredElement else value
                           for element, value in zip(node.elements, elements))
            return Value(params_of=params, elements=elements, iterates=_common_ref([e.ref for e in elements]), visits=visits)
        if type(node) is cst.FormattedString:
            parts = [self.expr(part, statement, parents) for part in _subexpressions(node)]
            ranks = {part.rank for part in parts if part.rank}
            return Value(rank=replace(ranks.pop(), formatted=True) if len(ranks) == 1 else None)
        # Anything else: evaluate the parts and pass parameter flows through (dicts, operators, f-strings).
        parts = [self.expr(part, statement, parents) for part in _subexpressions(node)]
        params = frozenset().union(*(part.params_of for part in parts))
        if type(node) is cst.Dict and node.elements and all(type(element) is cst.DictElement for element in node.elements):
            entries = parts[1::2]  # keys and values alternate
            if all(len(entry.callees) == 1 for entry in entries):
                return Value(params_of=params, table=tuple(entry.callees[0] for entry in entries))
        return Value(params_of=params)

    def comparison(self, node: cst.Comparison, statement: cst.CSTNode, parents: tuple) -> Value:
        """`rank == 0`, `dist.get_rank() != 0`, `local_rank in (-1, 0)`: true on some ranks only.
        The same on every rank: `local_rank == -1` and `os.environ.get("RANK") is None` (launched
        distributed or not), `rank >= 0` and `rank < 0` (no rank is negative). `rank in group_ranks`
        (a collection that is no literal) and `offset <= rank < offset + size` ask whether this rank
        is in a group, whose ranks then work together, as Megatron's pipeline stages do: no rank
        test either."""
        values = [self.expr(part, statement, parents) for part in _subexpressions(node)]
        params = frozenset().union(*(value.params_of for value in values))
        compares_rank = any(value.rank is not None for value in values)
        same_everywhere = any(type(target.operator) in (cst.Is, cst.IsNot)
                              or type(target.operator) in (cst.Equal, cst.NotEqual) and _is_minus_one(target.comparator)
                              or _sign_test(target)
                              or type(target.operator) in (cst.In, cst.NotIn) and type(target.comparator) not in _LITERAL_COLLECTIONS
                              for target in node.comparisons) or _group_range(node)
        return Value(params_of=params, rank_test=RankTest(True, True) if compares_rank and not same_everywhere else None)

    def rank_meaning(self, node: cst.Call, value: Value) -> Value:
        """What a call's result says of the rank, by the callee's name: `dist.get_rank()`,
        `get_local_rank()`, `is_main_process()`, `os.environ.get("RANK")`."""
        if value.rank is not None or value.rank_test:
            return value  # an inlined function returned it, `int(rank)`, `dist.get_rank()`, `os.environ.get("RANK")`
        qname = self.file.qualify(node.func)
        # `Cluster().get_rank()`: a method of an object, by the method's name.
        method = node.func.attr.value if type(node.func) is cst.Attribute else ""
        name = (qname or dotted_name(node.func) or method).rsplit(".", 1)[-1]
        getter, flag = distributed.is_rank_getter(name), distributed.is_main_process_flag(name)
        # A function of this run is judged by what it returns (inlined), not by its name.
        if (getter or flag) and self.flow.program.resolve_function(self.file, self.function, node) is None:
            return dataclasses.replace(value, rank=Rank(SOME_RANK) if getter else None, rank_test=RankTest(True, True) if flag else None)
        return value

    def comprehension(self, node: cst.BaseComp, statement: cst.CSTNode, parents: tuple) -> Value:
        """What the elements carry: `{k: v.full_tensor() for k, v in sd.items()}` carries no shards."""
        clause = node.for_in
        while clause is not None:
            iterable = self.expr(clause.iter, statement, parents)
            # As in a `for` loop, the target is an element of what is iterated (`b` in
            # `[fully_shard(b) for b in model.layers]` is a sub-module of `model`).
            element = self.element_of(iterable)
            self.bind(clause.target, Value(ref=element.ref, params_of=iterable.params_of, iterates=None if element.ref else iterable.iterates))
            for condition in clause.ifs:
                self.expr(condition.test, statement, parents)
            clause = clause.inner_for_in
        parts = (node.key, node.value) if type(node) is cst.DictComp else (node.elt,)
        values = [self.expr(part, statement, parents) for part in parts]
        params = frozenset().union(*(value.params_of for value in values))
        # `[m for m in model.layers if ...]` still iterates sub-modules of `model`.
        return Value(params_of=params, iterates=_common_ref([value.ref for value in values]))

    def call(self, node: cst.Call, statement: cst.CSTNode, parents: tuple, with_item: bool) -> Value:
        return self.rank_meaning(node, self._call(node, statement, parents, with_item))

    def _call(self, node: cst.Call, statement: cst.CSTNode, parents: tuple, with_item: bool) -> Value:
        func = node.func
        receiver = self.expr(func.value, statement, parents) if type(func) is cst.Attribute else Value()
        args = tuple(self.expr(arg.value, statement, parents) for arg in node.args if arg.keyword is None and not arg.star)
        kwargs = {arg.keyword.value: self.expr(arg.value, statement, parents) for arg in node.args if arg.keyword is not None}
        flowing = frozenset().union(*(value.params_of for value in (*args, *kwargs.values())))
        qname = self.file.qualify(func)
        common = dict(statement=statement, parents=parents, qname=qname, args=args, kwargs=kwargs, with_item=with_item)

        if qname == FULLY_SHARD:
            module = args[0] if args else kwargs.get("module", Value())
            if module.elements is not None or module.iterates is not None:
                # A list of modules, literal or built: they are sub-modules of what they come from.
                listed = [element.ref for element in module.elements or () if element.ref]
                targets = tuple(listed) or ((module.iterates.child("[]"),) if module.iterates else ())
            else:
                targets = (module.ref,) if module.ref else ()
            event = self.emit(SHARD, node, targets=targets, **common)
            return Value(ref=module.ref, event=event)
        if qname == FSDP1_WRAPPER:
            module = args[0] if args else kwargs.get("module", Value())
            event = self.emit(WRAP, node, targets=(module.ref,) if module.ref else (), **common)
            return Value(ref=module.ref, event=event)
        if qname is None and type(func) is cst.Name and func.value in _ITERABLE_WRAPPERS and args:
            return Value(iterates=args[0].iterates or args[0].ref, params_of=flowing, visits=_visits_through(func.value, args))
        if qname == "itertools.chain" and args and not any(arg.star for arg in node.args):
            parts = [arg.visits if arg.visits is not None else (self.element_of(arg),) for arg in args]
            return Value(iterates=_common_ref([arg.iterates or arg.ref for arg in args]), params_of=flowing,
                         visits=tuple(visit for part in parts for visit in part))
        if self.builds_on_meta(node):
            return Value(event=Event(META, node, self.file, statement, parents, self.chain))
        callee = self.flow.program.resolve_function(self.file, self.function, node)
        if callee is None:
            callee = self.method_of_instance(func, receiver)
            if callee is not None:  # still a method call on a tracked value, as rules read it (`model.forward(x)`)
                self.emit(METHOD, node, targets=(receiver.ref,), method=func.attr.value, **common)
        if callee is not None:
            return self.inline(callee, node, args, kwargs, receiver, statement, parents)
        if type(func) in (cst.Subscript, cst.Call) or type(func) is cst.Name and func.value in self.env:
            return self.call_value(node, args, kwargs, statement, parents)
        if type(func) is cst.Attribute and qname is None and func.attr.value == "get" and receiver.table:
            return Value(callees=receiver.table)  # `table.get(key)`: one of its functions
        # Parameters handed over directly, not an existing optimizer handed to a helper.
        handed = frozenset().union(*(v.params_of for v in (*args, *kwargs.values()) if v.ref not in self.flow.optimizer_bindings))
        if self.is_optimizer(qname, node, handed):
            event = self.emit(OPTIMIZER, node, params_of=handed, **common)
            return Value(event=event, params_of=handed)
        if type(func) is cst.Attribute and receiver.ref is not None and qname is None:
            method = func.attr.value
            event = self.emit(METHOD, node, targets=(receiver.ref,), method=method, **common)
            if method in _COLLECTS and not receiver.ref.path:
                # `modules.append(module)` in a loop over `model.named_modules()`: the list's elements come from `model`.
                self.flow.derived_from.setdefault(receiver.ref.root, set()).update(*(self.roots_read(arg.value) for arg in node.args))
            if method in _PARAMETER_METHODS:
                return Value(params_of=frozenset({receiver.ref}), event=event)
            if method in _ITERATES_SUBMODULES:
                return Value(iterates=receiver.ref, event=event)
            if method in _RETURNS_SELF:
                return Value(ref=receiver.ref, event=event)
            if method == "state_dict":
                return Value(event=event, params_of=receiver.params_of | {receiver.ref})
            if method in _GATHERS:
                return Value(event=event)
            return Value(event=event, params_of=receiver.params_of)
        if (type(func) is cst.Attribute and qname is None and func.attr.value in _RETURNS_SELF
                and receiver.event is not None and receiver.event.kind == CALL):
            return receiver  # `nn.Linear(4, 4).to(device)` is still the module `nn.Linear(...)` built
        callee_ref = self.ref_of(func) if qname is None else None
        if callee_ref is not None:
            return Value(event=self.emit(CALL_VALUE, node, targets=(callee_ref,), **common))
        event = self.emit(CALL, node, **{**common, "qname": qname or dotted_name(func)})
        if qname in distributed.RETURNS_ITS_MODULE and args and args[0].ref is not None:
            return args[0]  # `model = parallelize_module(model, ...)` is still `model`
        return Value(event=event, params_of=flowing if qname is None else frozenset(), rank=self.rank_of_call(qname, func, node, args))

    @staticmethod
    def rank_of_call(qname: str | None, func: cst.CSTNode, node: cst.Call, args: tuple[Value, ...]) -> Rank | None:
        """`dist.get_rank()`, `os.environ.get("LOCAL_RANK")`, `int(rank)`: the rank the call returns."""
        if qname in _RANK_CALLS:
            return Rank(SOME_RANK if node.args else _RANK_CALLS[qname])  # `dist.get_rank(group)`: the rank within a group
        if qname in _ENVIRONMENT_READS and node.args:
            return _rank_variable(node.args[0].value)
        if qname is None and type(func) is cst.Name and func.value in _RANK_CONVERSIONS and len(args) == 1:
            return args[0].rank
        return None

    @staticmethod
    def is_meta_literal(node: cst.CSTNode) -> bool:
        return type(node) is cst.SimpleString and node.evaluated_value == "meta"

    def builds_on_meta(self, node: cst.Call) -> bool:
        """`Model(..., device="meta")` or `device=torch.device("meta")`."""
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "device":
                if self.is_meta_literal(arg.value) or self.is_meta_device(arg.value):
                    return True
        return False

    def is_meta_device(self, node: cst.CSTNode) -> bool:
        """`torch.device("meta")` used as a context manager."""
        return (
            type(node) is cst.Call
            and self.file.qualify(node.func) == "torch.device"
            and bool(node.args)
            and self.is_meta_literal(node.args[0].value)
        )

    def is_optimizer(self, qname: str | None, node: cst.Call, flowing: frozenset[Ref]) -> bool:
        if qname:
            parts = qname.split(".")
            if "lr_scheduler" in parts or not parts[-1][:1].isupper():
                return False
            return any(part in ("optim", "optimizers") for part in parts[:-1]) or parts[-1].endswith("Optimizer")
        # A call we cannot resolve that takes model parameters: an optimizer when its name says so.
        name = (dotted_name(node.func) or "").lower()
        return bool(flowing) and ("optim" in name or name.endswith(("adam", "adamw", "sgd")))

    def method_of_instance(self, func: cst.BaseExpression, receiver: Value) -> FunctionInfo | None:
        """`trainer.save(...)` where `trainer = Trainer(...)` and this run defines `Trainer.save`."""
        if not type(func) is cst.Attribute or receiver.ref is None or receiver.ref.path:
            return None
        built_by = self.flow.origin(receiver, len(self.flow.events))
        if built_by is None or built_by.kind not in (CALL, CALL_VALUE) or not type(built_by.node) is cst.Call:
            return None
        qualname = f"{(dotted_name(built_by.node.func) or '').rsplit('.', 1)[-1]}.{func.attr.value}"
        candidates = [f for f in self.flow.program.functions_by_name.get(func.attr.value, ()) if f.qualname == qualname]
        return candidates[0] if len(candidates) == 1 else None

    def call_value(self, node: cst.Call, args: tuple[Value, ...], kwargs: dict[str, Value], statement: cst.CSTNode, parents: tuple) -> Value:
        """A call of a value: a function taken from a dispatch table (`MODES[mode]()`), or one a name was bound to."""
        function = self.expr(node.func, statement, parents)
        if not function.callees:
            common = dict(statement=statement, parents=parents, args=args, kwargs=kwargs)
            if function.ref is None:
                return Value(event=self.emit(CALL, node, **common))
            return Value(event=self.emit(CALL_VALUE, node, targets=(function.ref,), **common))
        if self.forwarded is not None and node.args and all(arg.star for arg in node.args):
            args, kwargs = self.forwarded  # `fn(*args, **kwargs)` in a decorator's wrapper: the decorated call's arguments
        return self.call_one_of(function.callees, node, args, kwargs, statement, parents)

    def call_one_of(self, callees: tuple[FunctionInfo, ...], node: cst.Call, args: tuple[Value, ...], kwargs: dict[str, Value],
                    statement: cst.CSTNode, parents: tuple) -> Value:
        """Calls one of `callees`: each in an arm of its own, which of them not known."""
        if len(callees) == 1:
            return self.inline(callees[0], node, args, kwargs, Value(), statement, parents)
        self.branches(node, [(lambda callee=callee: self.inline(callee, node, args, kwargs, Value(), statement, parents), False) for callee in callees])
        return Value()

    def decorator_wrapper(self, callee: FunctionInfo) -> tuple[FunctionInfo, str] | None:
        """The wrapper a decorator of the run puts around `callee`, and the decorator's parameter that
        holds the function: `def cleanup(fn): def wrapper(*a, **k): try: return fn(*a, **k) finally: ...; return wrapper`."""
        for decorator in callee.node.decorators:
            if type(decorator.decorator) not in (cst.Name, cst.Attribute):
                continue
            function = self.flow.program.resolve_callable(callee.file, None, decorator.decorator)
            body = _body(function.node.body) if function is not None else []
            if not body or not function.params or type(body[-1]) is not cst.SimpleStatementLine:
                continue
            returned = body[-1].body[-1]
            if type(returned) is cst.Return and type(returned.value) is cst.Name:
                wrapper = function.file.functions.get(f"{function.qualname}.{returned.value.value}")
                if wrapper is not None:
                    return wrapper, function.params[0]
        return None

    def inline(self, callee: FunctionInfo, node: cst.Call, args: tuple[Value, ...], kwargs: dict[str, Value], receiver: Value, statement: cst.CSTNode, parents: tuple) -> Value:
        callee.called = True
        if self.depth >= _MAX_INLINE_DEPTH or id(callee.node) in self.stack:
            event = self.emit(CALL, node, statement=statement, parents=parents, qname=callee.qualname, args=args, kwargs=kwargs)
            return Value(event=event)
        wrapped = self.decorator_wrapper(callee) if self.forwarded is None or self.forwarded_to is not callee else None
        if wrapped is not None:
            # The decorator's wrapper runs, and calls the function where it calls its parameter
            # (inside its `try`, before its `finally`).
            wrapper, holder = wrapped
            walker = _Walker(self.flow, wrapper.file, wrapper, {holder: Value(callees=(callee,))}, f"{wrapper.name}@{self.flow.program.next_call_id()}:",
                             self.chain, self.depth + 1, self.stack, self.outer + parents + (statement,), self.rank_guards, self.call_sites,
                             self.contexts, self.arms)
            walker.forwarded, walker.forwarded_to = (args, kwargs), callee
            walker.walk_suite(wrapper.node.body, ())
            return walker.returned
        self.emit(ENTER, node, statement=statement, parents=parents, qname=callee.qualname, args=args, kwargs=kwargs)
        prefix = f"{callee.name}@{self.flow.program.next_call_id()}:"
        env: dict[str, Value] = {}
        params = list(callee.params)
        if callee.class_name and params and params[0] in ("self", "cls"):
            self_name = params.pop(0)
            if type(node.func) is cst.Attribute:
                env[self_name] = receiver if receiver.ref else Value(ref=Ref(prefix + self_name))
                # What the caller knows of `self.x` holds in the callee too.
                env.update({key: value for key, value in self.env.items() if key.startswith("self.")})
        for name, value in zip(params, args):
            env[name] = value
        for name, value in kwargs.items():
            if name in params:
                env[name] = value
        # Without `*args`/`**kwargs` at the call, a parameter not given keeps its default.
        defaults_apply = not any(arg.star for arg in node.args)
        falsy = _falsy_defaults(callee.node) if defaults_apply else set()
        for name in params:
            if name not in env and _literal_default(callee.node, name):
                env[name] = Value(constant=_literal_default(callee.node, name))
            if name not in env or env[name].ref is None:
                given = env.get(name, Value())
                env[name] = Value(ref=Ref(prefix + name), params_of=given.params_of, rank=given.rank, constant=given.constant,
                                  rank_test=given.rank_test, always_false=name in falsy and name not in env)
                self.flow.assigned_roots.add(prefix + name)
                self.record_origin(prefix + name, given.event)
        walker = _Walker(self.flow, callee.file, callee, env, prefix, self.chain + (callee.name,), self.depth + 1, self.stack,
                         self.outer + parents + (statement,), self.rank_guards, self.call_sites + (node,), self.contexts, self.arms)
        walker.walk_suite(callee.node.body, ())
        return walker.returned

    def emit(self, kind: str, node: cst.CSTNode, statement: cst.CSTNode, parents: tuple, **fields) -> Event:
        event = Event(kind, node, self.file, statement, parents, self.chain, function=self.function, outer=self.outer,
                      rank_guards=self.rank_guards, arms=self.arms, call_sites=self.call_sites, contexts=self.contexts,
                      index=len(self.flow.events), **fields)
        self.flow.events.append(event)
        return event


def _bound_names(statements) -> Iterator[str]:
    """Every name the statements bind (assignments, loop targets, `with ... as`), nested blocks
    included, nested functions and classes not."""
    def targets(node: cst.CSTNode) -> Iterator[str]:
        if type(node) is cst.Name:
            yield node.value
        elif type(node) in (cst.Tuple, cst.List):
            for element in node.elements:
                yield from targets(element.value)
        elif type(node) is cst.StarredElement:
            yield from targets(node.value)

    for statement in statements:
        if type(statement) is cst.SimpleStatementLine:
            for small in statement.body:
                if type(small) is cst.Assign:
                    for target in small.targets:
                        yield from targets(target.target)
                elif type(small) in (cst.AnnAssign, cst.AugAssign):
                    yield from targets(small.target)
        elif type(statement) in (cst.FunctionDef, cst.ClassDef):
            continue
        else:
            if type(statement) is cst.For:
                yield from targets(statement.target)
            if type(statement) is cst.With:
                for item in statement.items:
                    if item.asname:
                        yield from targets(item.asname.name)
            for suite in _suites(statement):
                yield from _bound_names(_body(suite))


def _literal_default(function: cst.FunctionDef, name: str) -> str | None:
    """"None", "True" or "False" when the parameter's default is that literal."""
    for param in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params):
        if param.name.value == name and type(param.default) is cst.Name and param.default.value in _CONSTANTS:
            return param.default.value
    return None


def _decorator_name(decorator: cst.Decorator) -> str:
    """`rank_zero_only` for `@rank_zero_only`, `@utils.rank_zero_only` and `@accelerator.on_main_process(...)`."""
    node = decorator.decorator.func if type(decorator.decorator) is cst.Call else decorator.decorator
    return (dotted_name(node) or "").rsplit(".", 1)[-1]


def _falsy_defaults(function: cst.FunctionDef) -> set[str]:
    """Parameters whose default is `False` or `None`."""
    params = (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)
    return {p.name.value for p in params if type(p.default) is cst.Name and p.default.value in ("False", "None")}


def _exits_block(suite: cst.CSTNode) -> bool:
    """The block ends in `return`, `raise`, `continue` or `break`: what follows it runs only where its test failed."""
    body = _body(suite)
    last = body[-1] if body else None
    return type(last) is cst.SimpleStatementLine and isinstance(last.body[-1], (cst.Return, cst.Raise, cst.Continue, cst.Break))


def _visits_through(wrapper: str, args: tuple[Value, ...]) -> tuple[Value, ...] | None:
    """What `enumerate(x)`, `reversed(x)`, `zip(x, y)`, `list(x)`... visit, from what `x` visits."""
    known = [arg.visits for arg in args]
    if any(visits is None for visits in known):
        return None
    if wrapper in ("list", "tuple", "iter"):
        return known[0]
    if wrapper == "reversed":
        return known[0][::-1]
    if wrapper == "enumerate":
        return tuple(Value(elements=(Value(), visit)) for visit in known[0])
    if wrapper == "zip":
        return tuple(Value(elements=values) for values in zip(*known))
    return None  # `sorted`, `filter`: which, in which order, is not known


def _nothing() -> None:
    """An arm with no statements: an `if` without `else`."""


def _else_exits(node: cst.If) -> bool:
    """Every path through the `else` (each arm of an `elif` chain) exits the block."""
    if type(node.orelse) is cst.If:
        return _exits_block(node.orelse.body) and _else_exits(node.orelse)
    return node.orelse is not None and _exits_block(node.orelse.body)


_LITERAL_COLLECTIONS = (cst.Tuple, cst.List, cst.Set)


def _sign_test(target: cst.ComparisonTarget) -> bool:
    """`>= 0`, `> -1`, `< 0`, `<= -1`: whether a rank is negative, which is the same on every rank."""
    operator, bound = type(target.operator), target.comparator
    zero = type(bound) is cst.Integer and bound.value == "0"
    return operator in (cst.GreaterThanEqual, cst.LessThan) and zero or operator in (cst.GreaterThan, cst.LessThanEqual) and _is_minus_one(bound)


def _group_range(node: cst.Comparison) -> bool:
    """`lo <= rank < hi` with bounds computed, not written: the ranks of a group."""
    ordering = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)
    bounds = (node.left, node.comparisons[-1].comparator)
    return (len(node.comparisons) == 2 and all(type(target.operator) in ordering for target in node.comparisons)
            and not all(type(bound) is cst.Integer for bound in bounds))


def _holds(suite: cst.BaseSuite, statement: cst.CSTNode) -> bool:
    """Whether `statement` is one of the block's own statements."""
    return type(suite) is cst.IndentedBlock and any(s is statement for s in suite.body)


def _is_minus_one(node: cst.CSTNode) -> bool:
    return (type(node) is cst.UnaryOperation and type(node.operator) is cst.Minus
            and type(node.expression) is cst.Integer and node.expression.value == "1")


def _common_ref(refs: list[Ref | None]) -> Ref | None:
    """The longest ref all of `refs` lie within: `(model.a, model.b)` -> `model`."""
    if not refs or any(ref is None for ref in refs):
        return None
    first = refs[0]
    if any(ref.root != first.root for ref in refs):
        return None
    path: list[str] = []
    for parts in zip(*(ref.path for ref in refs)):
        if any(part != parts[0] for part in parts):
            break
        path.append(parts[0])
    return Ref(first.root, tuple(path))


def _rank_variable(node: cst.CSTNode) -> Rank | None:
    """The rank an environment variable named by `node` holds (`"LOCAL_RANK"`, `"NODE_RANK"`), if it is one."""
    if not type(node) is cst.SimpleString:
        return None
    name = str(node.evaluated_value)
    if name in _RANK_VARIABLES:
        return Rank(_RANK_VARIABLES[name], variable=name)
    return Rank(SOME_RANK, variable=name) if distributed.is_rank_env_var(name) else None


_LEAVES = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.Ellipsis)


def _subexpressions(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The expressions directly inside `node`, without LibCST's costly generic `children`."""
    if type(node) in _LEAVES:
        return []
    if type(node) in (cst.BinaryOperation, cst.BooleanOperation, cst.ConcatenatedString):
        return [node.left, node.right]
    if type(node) is cst.Comparison:
        return [node.left, *(target.comparator for target in node.comparisons)]
    if type(node) in (cst.UnaryOperation, cst.Await):
        return [node.expression]
    if type(node) is cst.IfExp:
        return [node.test, node.body, node.orelse]
    if type(node) is cst.Dict:
        return [part for element in node.elements for part in ((element.key, element.value) if type(element) is cst.DictElement else (element.value,))]
    if type(node) is cst.Set:
        return [element.value for element in node.elements]
    if type(node) is cst.FormattedString:
        return [part.expression for part in node.parts if type(part) is cst.FormattedStringExpression]
    if type(node) in (cst.StarredElement, cst.NamedExpr, cst.Yield, cst.Expr):
        return [node.value] if node.value is not None else []
    return [child for child in node.children if isinstance(child, cst.BaseExpression)]
