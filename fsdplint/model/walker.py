"""The walker: evaluates one function body statement by statement into its flow's events, following calls."""

from __future__ import annotations

import dataclasses
import operator
from contextlib import contextmanager
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping, Sequence

import libcst as cst

from fsdplint import distributed
from fsdplint.model import conditions
from fsdplint.model.events import (
    NO_SPREAD,
    ASSIGN,
    CALL,
    CALL_VALUE,
    ENTER,
    GUARD_AFTER_EXIT,
    GUARD_BODY,
    GUARD_DECORATED,
    GUARD_ELSE,
    META,
    METHOD,
    OPTIMIZER,
    SET_ENV,
    SHARD,
    WRAP,
    Event,
    EventKind,
    Fact,
    RankGuard,
)
from fsdplint.model.constructors import attribute_built_by, attributes_at, stored_attributes
from fsdplint.model.files import FileModel, FunctionInfo
from fsdplint.model.flow import Loop, Write
from fsdplint.model.modules import RETURNS_SELF
from fsdplint.model.summaries import Surroundings, walk_body
from fsdplint.model.names import (
    BUILTINS,
    CONSTANTS,
    FSDP1_WRAPPER,
    FSDP_CLASSES,
    FULLY_SHARD,
    dotted_name,
)
from fsdplint.model.ranks import (
    RANK_CALLS,
    is_rank_number,
    is_world_size_variable,
    rank_derived_of_call,
    rank_of_call,
    rank_variable,
    rank_written,
    world_size_of_call,
)
from fsdplint.model.syntax import (
    LITERAL_COLLECTIONS,
    arguments_fit,
    else_arm_exits,
    environment_variable,
    exits_block,
    falsy_defaults,
    integer_literal,
    number_literal,
    is_group_range,
    is_sign_test,
    isinstance_classes,
    leaves_a_loop,
    literal_default,
    no_statements,
    parameter_default,
    parts_that_hold,
    patched_names,
    returned_names,
    statements_of,
    string_default,
    string_value,
    subexpressions,
    target_names,
)
from fsdplint.model.values import (
    ANY_ELEMENT,
    NO_KEYWORDS,
    NO_REFS,
    GLOBAL_RANK,
    LOCAL_RANK,
    RANK_NUMBER,
    RANK_PART,
    SELF_OR_BELOW,
    SOME_RANK,
    UNKNOWN_PART,
    Arms,
    Element,
    Rank,
    RankScope,
    RankTest,
    Ref,
    Value,
    reads_of,
    refs_of,
)

if TYPE_CHECKING:
    from fsdplint.model.flow import Flow


# Dict methods that leave the dict as it was: its entries stay known.
_READS_A_DICT = frozenset({"get", "items", "keys", "values", "copy", "__contains__"})
# Calls that build a path from strings: one formatted from the rank names a file per rank.
_BUILDS_PATHS = frozenset({"os.path.join", "posixpath.join", "pathlib.Path", "pathlib.PurePath", "pathlib.PosixPath"})
# Builtins that pass an iterable through: iterating `enumerate(model.layers)` iterates the layers.
_ITERABLE_WRAPPERS = frozenset({"enumerate", "reversed", "list", "sorted", "tuple", "iter", "zip", "filter"})
# Module methods whose result iterates sub-modules.
_ITERATES_SUBMODULES = frozenset({"modules", "children", "named_modules", "named_children", "values", "items"})
_ITERATES_SELF_FIRST = frozenset({"modules", "named_modules"})  # `model.modules()` yields `model` first
_ITERATES_ELEMENTS = frozenset({"children", "named_children", "values", "items"})  # ... the direct elements, each of them
_VISITS_EVERY_ELEMENT = frozenset({"enumerate", "reversed", "list", "sorted", "tuple", "iter"})  # wrappers that leave none out
_PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})
# Methods whose result holds what the object held: a dict's entries, a tensor moved or cast.
_KEEPS_WHAT_IT_HOLDS = frozenset({"items", "values", "copy"}) | RETURNS_SELF
_COLLECTS = frozenset({"append", "extend", "insert", "add"})  # list and set methods that take in elements
# Methods whose result no longer holds a shard of the parameters it came from.
_GATHERS = frozenset({"full_tensor", "to_local", "item", "tolist", "numpy"})
_MAX_INLINE_DEPTH = 4
_COROUTINE_TESTS = frozenset({"asyncio.iscoroutinefunction", "inspect.iscoroutinefunction"})
_EXPECTS_RAISE = frozenset({"raises", "assertRaises", "assertRaisesRegex"})  # pytest.raises, unittest's
_SUPPRESS = "contextlib.suppress"  # ... and a context that swallows what its block raises
_MAX_UNROLLED = 16  # a loop over at most this many known values is walked once per value
_SETS_ENVIRONMENT = frozenset({"os.environ.setdefault", "os.putenv"})
# Expressions one flow may evaluate, its inlined callees included: past it, the flow's facts are unknown
# (no events), so that no input makes a run take minutes. The largest flow of accelerate's 1,846
# evaluates 77k; nearly all evaluate under 5k.
FLOW_BUDGET = 40_000
# Work one program (the files analyzed together) may do, over all its flows and parses: past it, the
# flows not yet built are unknown and the starts not yet reached are not parsed, so that a repository
# where nearly every file uses torch.distributed ends in under a minute (Megatron-LM: 750 files, 8.8M
# expressions; NVIDIA-NeMo/Automodel: one program of 855 files, 12 MB, 82 s and 1 GB unbounded). The
# largest program of the benchmark repositories, DeepSpeed's, takes 2.2M expressions and 5.5 MB parsed.
PROGRAM_BUDGET = 4_000_000
# Parsing a file is charged to the same budget, one step per this many characters: on this machine one
# step (an expression evaluated) costs about what LibCST takes to parse 4-5 characters.
CHARACTERS_PER_STEP = 4

class BudgetExhausted(Exception):
    """A flow evaluated more than FLOW_BUDGET expressions."""


class Walker:
    """Walks one function body in textual order, appending events to the flow, inlining callees."""

    def __init__(self, flow: Flow, file: FileModel, function: FunctionInfo | None, env: dict[str, Value], prefix: str, chain: tuple[str, ...], depth: int, stack: tuple[int, ...] = (),
                 outer: tuple[cst.CSTNode, ...] = (), rank_guards: tuple[RankGuard, ...] = (), call_sites: tuple[cst.Call, ...] = (),
                 contexts: tuple[Event, ...] = (), arms: Arms = (), facts: tuple[Fact, ...] = ()) -> None:
        self.flow = flow
        self.file = file
        self.function = function
        self.env = env  # names and `self.x` chains -> values
        self.prefix = prefix
        self.chain = chain
        self.depth = depth
        self.stack = stack + ((id(function.node),) if function else ())
        self.returned = Value()
        self.returns = 0  # `return` statements with a value walked so far
        # Whether a path returns None under a test of the rank made in this body, and whether another returns an object.
        self.none_under_rank_test = self.object_returned = False
        self.entry_rank_guards = len(rank_guards)
        self.type_tests = 0  # the bodies of `if`s on a Value.type_test the walk is in
        self.spread: tuple[cst.Call, dict[str, Value]] | None = None  # the call being made and the keywords its `**` dicts give
        # Every path through the statement just walked leaves the block (an `if` whose test is known
        # and whose arm taken returns, both arms raising): the rest of the block does not run.
        self.path_ended = False
        # Where the path ended at a `raise`: how many events the flow had when the raise began (None
        # where it ended otherwise). An arm whose first event is its raise's marks no code past it.
        self.raised_at: int | None = None
        self.meta_depth = 0
        self.outer = outer  # statements around the call sites that led here (Event.outer)
        # What holds for every event of this walk, the caller's included (see Event).
        self.rank_guards = rank_guards
        self.call_sites = call_sites
        self.contexts = contexts
        self.arms = arms
        self.facts = facts
        self.passes = ""  # the unrolled loop passes the walk is in (`/0/2`), for arm_key
        # In a decorator's wrapper: the decorated call's arguments, and the function it decorates.
        self.forwarded: tuple[tuple[Value, ...], dict[str, Value]] | None = None
        # A decorated method's receiver at the decorated call, with what its `self.x` hold there.
        self.forwarded_receiver: tuple[Value, dict[str, Value]] | None = None
        self.forwarded_to: FunctionInfo | None = None
        if function is not None and function.decorated_by(*distributed.MAIN_PROCESS_DECORATORS):
            self.rank_guards += (RankGuard(function.node, GUARD_DECORATED, file, chain),)
        # Functions a test replaces with mocks (`@patch("pkg.mod.shard")`): calls of them run no code of the run.
        self.patched: frozenset[str] = frozenset(patched_names(function.node, file)) if function is not None and depth == 0 else frozenset()
        self.raising = False  # in the body of `pytest.raises(...)`: the functions it calls are not followed

    @contextmanager
    def guarded(self, node: cst.CSTNode, branch: str, test: RankTest | None, applies: bool) -> Iterator[None]:
        """Events emitted inside run under a RankGuard when `test` says the branch is rank-dependent."""
        saved = self.rank_guards
        if test is not None and applies:
            self.rank_guards += (RankGuard(node, branch, self.file, self.chain, test.equivalent),)
        try:
            yield
        finally:
            self.rank_guards = saved

    @contextmanager
    def holding(self, test: cst.CSTNode, truth: bool) -> Iterator[None]:
        """Events emitted inside run where `test` has this truth (Event.facts)."""
        saved = self.facts
        self.facts += self.facts_of(test, truth)
        try:
            yield
        finally:
            self.facts = saved

    def facts_of(self, test: cst.CSTNode, truth: bool) -> tuple[Fact, ...]:
        """What `test` having this truth says, part by part (`a and b` true: both true; `not` folded),
        each part a formula (`formula_of`): a variable of the walk (`cfg.fsdp`, `c.fsdp` where `c =
        train_config` of a caller's `cfg`) by the object it holds, any other part as its node."""
        return tuple((self.formula_of(part), holds) for part, holds in parts_that_hold(test, truth))

    def formula_of(self, test: cst.CSTNode) -> tuple:
        """The test as a formula (see conditions) of what its names hold here: a name bound to a test
        is that test's formula (`is_fsdp` where `is_fsdp = args.dist == "fsdp"`)."""
        kind = type(test)
        if kind is cst.UnaryOperation and type(test.operator) is cst.Not:
            return ("not", self.formula_of(test.expression))
        if kind is cst.BooleanOperation:
            return ("and" if type(test.operator) is cst.And else "or", self.formula_of(test.left), self.formula_of(test.right))
        if kind is cst.Comparison and len(test.comparisons) == 1:
            # `args.dist == "fsdp"`, `stage >= 2`, `0 < stage` (not `x is None`: tests of None are many,
            # and say little of which arm runs)
            compared = _compared(test, self.file, self.subject_of, either_side=True)
            if compared is not None:
                return compared
        if kind is cst.Call and self.file.qualify(test.func) in distributed.PROCESS_GROUP_QUERIES:
            return conditions.GROUP_STARTED
        name = dotted_name(test)
        if name is not None and self.is_variable(name.split(".")[0]):
            bound = self.env.get(name)
            if bound is not None and bound.formula is not None:
                return bound.formula
            ref = self.ref_of(test)
            if ref is not None:
                return self.property_formula(test, ref) or ref
        return test

    def property_formula(self, test: cst.CSTNode, ref: Ref) -> tuple | None:
        """`policy.enabled`, where `policy` was built by a class of the run whose `enabled` is a property
        returning a test of its own attributes (`return self.stage > 0`): that test, of `policy`'s. None
        where the property returns anything else, or the class is not known."""
        if type(test) is not cst.Attribute or not ref.path or not self.flow.program.may_define_property(test.attr.value):
            return None
        owner = self.env.get(dotted_name(test.value) or "")
        built_by = owner.built_by if owner is not None and owner.built_by else self.kept_by_constructor(test.value)
        found = self.class_built_by(self.file, built_by) if built_by else None
        return self.property_test(found, test.attr.value, Ref(ref.root, ref.path[:-1])) if found else None

    def property_test(self, found: tuple[FileModel, str], name: str, owner: Ref) -> tuple | None:
        """The test property `name` of class `found` returns, of the object `owner` names (see `owned_test`)."""
        file, qualname = found
        getter = file.functions.get(f"{qualname}.{name}")
        if getter is None or getter.params != ["self"] or not getter.decorated_by("property"):
            return None
        body = [statement for statement in statements_of(getter.node.body)
                if not (type(statement) is cst.SimpleStatementLine and type(statement.body[0]) is cst.Expr and type(statement.body[0].value) is cst.SimpleString)]
        if len(body) != 1 or type(body[0]) is not cst.SimpleStatementLine or type(body[0].body[0]) is not cst.Return or body[0].body[0].value is None:
            return None
        formula = self.owned_test(body[0].body[0].value, owner, found)
        return formula if type(formula) is tuple else None

    def owned_test(self, expression: cst.CSTNode, owner: Ref, found: tuple[FileModel, str]) -> tuple | Ref | None:
        """A test written in a method of class `found` on `self`'s attributes and literals, as a formula of
        the object `owner` names (`self.stage > 0` of `policy`: `policy.stage > 0`), a property of an
        attribute its constructor builds read as that property's test; None where a part is anything else."""
        file = found[0]
        kind = type(expression)
        if kind is cst.UnaryOperation and type(expression.operator) is cst.Not:
            inner = self.owned_test(expression.expression, owner, found)
            return None if inner is None else ("not", inner)
        if kind is cst.BooleanOperation:
            left, right = self.owned_test(expression.left, owner, found), self.owned_test(expression.right, owner, found)
            return None if left is None or right is None else ("and" if type(expression.operator) is cst.And else "or", left, right)
        if kind is cst.Comparison and len(expression.comparisons) == 1:
            def attribute(side: cst.CSTNode) -> Ref | None:
                subject = self.owned_test(side, owner, found)
                return subject if type(subject) is Ref else None
            return _compared(expression, file, attribute, either_side=False)
        name = dotted_name(expression)
        if name is None or name.split(".")[0] != "self" or name == "self":
            return None
        path = tuple(name.split(".")[1:])
        if len(path) == 2 and self.flow.program.may_define_property(path[1]):  # `self.sharding.enabled`: a property of the object the constructor keeps
            built_by = attribute_built_by(self.flow.program, file, found[1], path[0])
            held = self.class_built_by(file, built_by) if built_by else None
            expanded = self.property_test(held, path[1], Ref(owner.root, owner.path + path[:1])) if held else None
            if expanded is not None:
                return expanded
        return Ref(owner.root, owner.path + path)

    def constructor_facts(self, file: FileModel, qualname: str, owner: Ref) -> tuple[Fact, ...]:
        """What holds of every object of the class once its constructor returned, of the object `owner`
        names: the tests of its guard clauses (`if <test>: raise ...`, after the `if <test>: return`s
        before it, and `assert`s), at its top level or in a method of the class it calls there
        (deepmd-kit's `if self.sharding.enabled and self.change_bias_after_training: raise
        ValueError(...)`), on attributes the constructor keeps and nothing else in the class assigns."""
        program = self.flow.program
        key = (id(file), qualname)
        if key not in program.constructor_guards:  # once per class, of a stand-in for its object
            init = file.functions.get(f"{qualname}.__init__")
            facts = self.guard_facts(statements_of(init.node.body), file, qualname, _OBJECT, depth=0) if init is not None else []
            kept = stored_attributes(program, file, qualname, objects=True, through_packages=True)[1] if facts else {}
            program.constructor_guards[key] = (file, tuple(fact for fact in facts if all(ref.path[:1] and ref.path[0] in kept for ref in _refs_in(fact[0]))))
        facts = program.constructor_guards[key][1]
        if not facts or owner == _OBJECT:
            return facts
        def of_owner(ref: Ref) -> Ref:
            return Ref(owner.root, owner.path + ref.path) if ref.root == _OBJECT.root else ref
        return tuple((conditions.mapped(formula, of_owner), holds) for formula, holds in facts)

    def guard_facts(self, statements: list[cst.CSTNode], file: FileModel, qualname: str, owner: Ref, depth: int) -> list[Fact]:
        """The guard clauses of a constructor's (or a method's it calls) top-level `statements` (see `constructor_facts`)."""
        facts: list[Fact] = []
        returned: list[tuple] = []  # the tests of the `if ...: return`s passed: false past them
        for statement in statements:
            if type(statement) is cst.If and statement.orelse is None and statements_of(statement.body) \
                    and type(last := statements_of(statement.body)[-1]) is cst.SimpleStatementLine and type(last.body[-1]) in (cst.Raise, cst.Return):
                formula = self.owned_test(statement.test, owner, (file, qualname))
                if type(last.body[-1]) is cst.Return:
                    if formula is None:
                        break  # past it, what holds depends on a test not known
                    returned.append(formula)
                elif formula is not None:
                    facts.append((_all_of(*(("not", test) for test in returned), formula), False))
            elif type(statement) is cst.SimpleStatementLine and type(statement.body[0]) is cst.Assert and not returned:
                formula = self.owned_test(statement.body[0].test, owner, (file, qualname))
                if formula is not None:
                    facts.append((formula, True))
            elif type(statement) is cst.SimpleStatementLine and type(small := statement.body[0]) is cst.Expr and type(small.value) is cst.Call \
                    and type(small.value.func) is cst.Attribute and dotted_name(small.value.func.value) == "self" and depth < 2 and not returned:
                method = file.functions.get(f"{qualname}.{small.value.func.attr.value}")
                if method is not None:
                    facts += self.guard_facts(statements_of(method.node.body), file, qualname, owner, depth + 1)
            elif type(statement) is cst.SimpleStatementLine and type(statement.body[0]) is cst.Return:
                break
        return facts

    def kept_by_constructor(self, node: cst.CSTNode) -> str | None:
        """`self.sharding` in a method: the class (or function) its class's constructor builds it by."""
        function = self.function
        if type(node) is not cst.Attribute or type(node.value) is not cst.Name or function is None or function.class_name is None \
                or function.params[:1] != [node.value.value]:
            return None
        return attribute_built_by(self.flow.program, function.file, function.owner, node.attr.value)

    def class_built_by(self, file: FileModel, built_by: str) -> tuple[FileModel, str] | None:
        """The class of the run an object's `Value.built_by` (a qualified name, or a class of the file by
        its name), or a call written in `file` (`Policy(...)`, `Policy.from_params(...)`), built it by:
        a class, or a classmethod of one that returns an object of it."""
        program = self.flow.program
        head, _, method = built_by.rpartition(".")
        for written, factory in ((built_by, None), (head, method)):
            if not written:
                continue
            found = (file, written) if written in file.classes else program.class_named(file.qualify_written(written) or written, through_packages=True, importer=file)
            if found is not None and (factory is None or (maker := found[0].functions.get(f"{found[1]}.{factory}")) is not None and maker.returns_its_class()):
                return found
        return None

    def subject_of(self, node: cst.CSTNode) -> Ref | cst.CSTNode:
        """What a comparison compares: the object a variable of the walk holds, or the expression."""
        name = dotted_name(node)
        ref = self.ref_of(node) if name is not None and self.is_variable(name.split(".")[0]) else None
        return ref if ref is not None else node

    def is_variable(self, name: str) -> bool:
        """A name this walk bound, or a parameter of the flow's own function (the same object wherever
        it is read); not a global, which each function would name apart."""
        return name in self.env or self.function is not None and self.depth == 0 and name in self.function.params

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

    def branches(self, branching: cst.CSTNode, arms: Iterable[tuple[Callable[[], None], bool, cst.CSTNode | None]],
                 rank_test: RankGuard | None = None) -> None:
        """Walks the exclusive arms of `branching` in order, each from the same bindings (each arm a
        `walk`, whether it exits the block, and its block), then joins what the arms that fall through
        bound. The code past the statement, to the end of the function, never runs after an arm that
        returned on every path: it carries that (values.Arms), and what the arms that fall through
        carry. With `rank_test` (the guard of the body of an `if` on the rank), a name the two arms
        bind to `True` and `False` is a flag that holds where the arm that set it `True` runs."""
        start, reaching, returned, carried = self.env, [], [], ()
        for number, (walk, exits, suite) in enumerate(arms):
            self.env = dict(start)
            first_event = len(self.flow.events)
            with self.arm(branching, number):
                inside = len(self.arms)
                walk()
                passed = _returned_past(self.arms[inside:])
            if not exits and not self.path_ended:
                reaching.append((number, self.env))
                carried += tuple(arm for arm in passed if arm not in carried)
            elif self.path_ended and suite is not None and not leaves_a_loop(suite) and self.raised_at != first_event:
                # (`if not ok: raise ValueError(...)`, the arm holding nothing but its raise, has no event
                # that code past it could be ordered against: no mark, which every later event would carry)
                returned.append(number)
            self.path_ended = False
        self.env = self.join([env for _, env in reaching]) if reaching else start
        self.path_ended = not reaching
        if reaching:
            self.arms += carried + (((self.arm_key(branching), frozenset(returned)),) if returned else ())
        if rank_test is not None and len(reaching) == 2:
            test, holds = rank_test.condition()
            for key, value in self.env.items():
                literals = [env[key].literal if key in env else None for _, env in reaching]
                if "." not in key and sorted(literals, key=str) == ["False", "True"]:
                    in_body = reaching[literals.index("True")][0] == 0
                    self.env[key] = replace(value, rank_test=RankTest(True, True, (test, holds if in_body else not holds)))

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
            rank, tests = _rank_of_either(values), {value.rank_test for value in values}
            if len(tests) == 2 and None in tests and all(value.rank_test or value.literal for value in values):
                # A flag set from the rank on one path and a literal on the other (`serve = True; if
                # dist.is_initialized(): if rank > 0: serve = False`): the literal is the same on every
                # rank, so where the flag differs between ranks it does as the test says.
                tests.discard(None)
            # The world size on one path and a literal on the other (`world_size = 1` where there is no
            # process group), as for the rank: where it differs from the literal, it is the world size.
            world_size = any(value.world_size for value in values) and all(value.world_size or value.literal for value in values)
            if len({value.ref for value in values}) == 1:
                # the same object on every path (`model = FSDP(model)` in one arm): the last arm's value
                last = joined.get(key)
                if last is not None and last.entries is not None and any(value.entries is not last.entries for value in values):
                    # A dict changed on some paths only (`if resume: kwargs["sync_module_states"] = True`):
                    # what `f(**kwargs)` passes is not known.
                    last = joined[key] = replace(last, entries=None)
                if last is not None and last.rank_test is None and len(tests) == 1 and None not in tests:
                    # The flag of the rank test above, bound in each arm (nanoGPT's `if ddp: master_process =
                    # ddp_rank == 0 else: master_process = True`): one name, first bound in both arms.
                    last = joined[key] = replace(last, rank_test=next(iter(tests)), literal=None)
                if last is not None and last.rank is None and rank is not None:
                    last = joined[key] = replace(last, rank=rank)
                if last is not None and world_size and not last.world_size:
                    joined[key] = replace(last, world_size=True)
                continue
            ref = Ref(self.new_version(key)) if "." not in key else None
            if ref is None:
                joined.pop(key, None)  # `self.x`: read again as the attribute itself
                continue
            if len(values) == len(envs) and all(value.ref is not None for value in values):
                self.flow.write(Write.JOINED, ref.root, tuple(value.ref for value in values))
            derived = {value.rank_derived for value in values}
            joined[key] = Value(ref=ref, rank=rank, rank_test=tests.pop() if len(tests) == 1 else None,
                                rank_derived=derived.pop() if len(derived) == 1 else None, world_size=world_size,
                                type_test=any(value.type_test for value in values))
        return joined

    def read_rank(self, reads: bool) -> None:
        if reads:
            self.flow.write(Write.READS_RANK, None)

    def new_version(self, name: str) -> str:
        self.flow.versions += 1
        return f"{self.prefix}{name}#{self.flow.versions}"

    def walk_function(self) -> None:
        """The function's body (the module's, for a module body), inside the gradient-free contexts its
        decorators open: `@torch.no_grad()` runs the body as `with torch.no_grad():` would (plainLM's
        evaluation). Only a decorator called in the `@` line, which is the `with` item's call."""
        function = self.function
        saved = self.contexts
        for decorator in function.node.decorators if function is not None else ():
            made = decorator.decorator
            if type(made) is cst.Call and self.file.qualify(made.func) in distributed.GRADIENT_FREE_CONTEXTS:
                self.contexts += (self.emit(CALL, made, function.node, (), qname=self.file.qualify(made.func), with_item=True),)
        self.walk_suite(function.node.body if function is not None else self.file.module, ())
        self.contexts = saved

    def walk_suite(self, suite: cst.CSTNode, parents: tuple[cst.CSTNode, ...]) -> None:
        if type(suite) in (cst.Module, cst.IndentedBlock):
            saved, saved_arms, saved_facts = self.rank_guards, self.arms, self.facts
            for statement in suite.body:
                test = self.statement(statement, parents)
                if self.path_ended:
                    break
                if type(statement) is not cst.If:
                    continue
                # `if not is_main: return`: the rest of the block runs where the test is false.
                if test is not None and test.when_false and statement.orelse is None and exits_block(statement.body):
                    self.rank_guards += (RankGuard(statement, GUARD_AFTER_EXIT, self.file, self.chain, test.equivalent),)
                # ... and in the `else` arm of that `if` (or its body, when its `else` is what exits)
                body_exits, else_exits = exits_block(statement.body), else_arm_exits(statement)
                if body_exits != else_exits:
                    self.arms += ((self.arm_key(statement), 0 if else_exits else 1),)
                    self.facts += self.facts_of(statement.test, else_exits)
            # What the block returned past holds past the block, to the end of the function (Walker.branches).
            self.rank_guards, self.arms, self.facts = saved, saved_arms + _returned_past(self.arms[len(saved_arms):]), saved_facts
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
            truth = self.truth_of(node.test, value)
            test = _truth_test(value)
            if test is not None and truth is None and self.facts:
                # A rank test the tests around it decide splits no ranks here (`if self.rank == 0: raise`
                # in a method a caller reaches only `else` of its `if node.rank == 0:`): one arm runs.
                truth = next((holds for holds in (True, False) if not conditions.can_hold(self.facts + self.facts_of(node.test, not holds))), None)
                test = test if truth is None else None
                self.flow.decided_by_facts += truth is not None
            if value.type_test:
                self.flow.write(Write.TYPE_TESTED, id(node))

            def body() -> None:
                with self.guarded(node, GUARD_BODY, test, bool(test and test.when_true)), self.holding(node.test, True):
                    self.type_tests += value.type_test
                    pinned, zero = self.rank_pinned_to_zero(node.test), Value(text="0")
                    if pinned is not None:
                        # Under `if global_rank == 0:` the rank is 0 (nupurkmr9/npedit's `f"cuda:{global_rank}"`
                        # there); past the `if`, the rank again, where the body did not bind the name anew.
                        held, self.env[pinned] = self.env[pinned], zero
                    self.walk_suite(node.body, inner)
                    if pinned is not None and self.env.get(pinned) is zero:
                        self.env[pinned] = held
                    self.type_tests -= value.type_test

            def orelse() -> None:
                if node.orelse is None:
                    return
                with self.guarded(node, GUARD_ELSE, test, bool(test and test.when_false)), self.holding(node.test, False):
                    if type(node.orelse) is cst.If:
                        self.statement(node.orelse, inner)  # an `elif` runs inside the `if`, where its test failed
                    else:
                        self.walk_suite(node.orelse.body, inner)

            # A test known true or false takes one arm; a path that ends in its arm (`return`, `raise`)
            # brings nothing to what follows.
            self.branches(node, [(body, exits_block(node.body), node.body) if truth is not False else (no_statements, True, None),
                                 (orelse, else_arm_exits(node), node.orelse) if truth is not True else (no_statements, True, None)],
                          RankGuard(node, GUARD_BODY, self.file, self.chain, test.equivalent) if test and test.when_true and test.when_false else None)
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
                    self.path_ended = False  # a pass that leaves the loop body: the next one still runs
                self.passes = passes
                if node.orelse:
                    self.walk_suite(node.orelse.body, inner)
                    self.path_ended = False  # after a `break`, what follows the loop runs
                return None
            element = self.element_of(iterable)
            container = iterable.ref if iterable.iterates is None else iterable.each_of
            if container is not None and element.ref is not None:
                # `for layer in model.layers`: each direct element in turn, wherever the body runs.
                element = replace(element, element=Element(container, None, self.arms))
            before = self.env
            self.env = dict(before)
            self.bind(node.target, element)
            if element.ref is None and element.elements is None:
                for name in target_names(node.target):
                    bound = self.env.get(name)
                    if bound is not None and bound.ref is not None and not bound.ref.path:
                        self.flow.write(Write.PER_PASS, bound.ref.root)
            if element.ref is None and type(node.target) is cst.Name and self.env[node.target.value].ref is not None:
                # `for module in children_bottom_up(model)[:-1]`: each element comes from `model`.
                self.flow.write(Write.DERIVED, self.env[node.target.value].ref.root, self.roots_read(node.iter))
            elif type(node.target) in (cst.Tuple, cst.List):
                # `for i, block, _ in block_iterator`: the parts of an element whose shape is not known
                # (those bound to no tracked object) come from what the iterable came from.
                sources = self.sources_of(node.iter)
                for part in node.target.elements:
                    bound = self.env.get(part.value.value) if type(part.value) is cst.Name else None
                    if sources and bound is not None and bound.ref is not None and not bound.ref.path and bound is not element \
                            and bound.ref.root not in sources and bound.ref.root not in self.flow.derived_from:
                        self.flow.write(Write.DERIVED, bound.ref.root, sources)
            first = len(self.flow.events)
            self.walk_suite(node.body, inner)
            self.path_ended = False  # the body may run no time
            self.record_loop(node, iterable, first, parents)
            self.env = self.join([before, self.env])  # the body may run no time
            if node.orelse:
                self.walk_suite(node.orelse.body, inner)
                self.path_ended = False
        elif type(node) is cst.While:
            self.expr(node.test, node, parents)
            before = self.env
            self.env = dict(before)
            first = len(self.flow.events)
            self.walk_suite(node.body, inner)
            self.path_ended = False
            self.record_loop(node, None, first, parents)
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
            # Under `pytest.raises` / `self.assertRaises` the body raises, where is not known: the
            # functions it calls are not followed (tnt's prepare_fsdp2 rejecting its arguments).
            saved_raising = self.raising
            expects_raise = any(type(item.item) is cst.Call and (dotted_name(item.item.func) or "").rsplit(".", 1)[-1] in _EXPECTS_RAISE
                                for item in node.items)
            self.raising = self.raising or expects_raise
            self.walk_suite(node.body, inner)
            if expects_raise or any(self.file.qualify(item.item.func if type(item.item) is cst.Call else item.item) == _SUPPRESS for item in node.items):
                self.path_ended = False  # the block's exception is caught there: what follows the `with` runs
            self.raising = saved_raising
            self.meta_depth -= meta
            self.contexts = saved_contexts
        elif type(node) in (cst.Try, cst.TryStar):
            # A handler runs after part of the body: it is no arm apart from the body, only from the
            # other handlers and the `else`; nor from what the body returned past.
            before = self.arms
            self.walk_suite(node.body, inner)
            self.path_ended = False  # a handler may run after part of the body
            self.arms = before
            arms = [(lambda handler=handler: self.walk_suite(handler.body, inner), exits_block(handler.body), handler.body) for handler in node.handlers]
            self.branches(node, arms + [(lambda: self.walk_suite(node.orelse.body, inner) if node.orelse else None, False, None)])
            if node.finalbody:
                self.path_ended = False  # `finally` runs on every path, after the arms that returned too
                passed, self.arms = self.arms[len(before):], before
                self.walk_suite(node.finalbody.body, inner)
                self.arms += passed
            self.path_ended = False
        elif type(node) is cst.Match:
            self.expr(node.subject, node, parents)
            # Without a catch-all case, no case may match: a last arm that does nothing.
            self.branches(node, [(lambda case=case: self.walk_suite(case.body, inner), exits_block(case.body), case.body) for case in node.cases]
                          + [(no_statements, False, None)])

    def record_loop(self, node: cst.For | cst.While, iterable: Value | None, first: int, parents: tuple[cst.CSTNode, ...]) -> None:
        self.flow.loops.append(Loop(node, iterable, self.file, self.function, self.chain, first, len(self.flow.events),
                                    self.rank_guards, self.call_sites, self.outer + parents, self.contexts))

    def part_by_rank(self, index: cst.BaseSlice | None) -> str | None:
        """RANK_PART for a subscript that picks a part by the rank (`data[rank::world_size]`, `chunks[rank]`,
        `data[:n + rank]`), evaluated already: its bounds are read again from the bindings, no call made."""
        if type(index) is cst.Index:
            return RANK_PART if is_rank_number(self.known(index.value)) else None
        if type(index) is not cst.Slice:
            return None
        lower, upper = (self.known(bound) if bound is not None else Value() for bound in (index.lower, index.upper))
        # Both bounds from the rank (`data[rank * k:(rank + 1) * k]`): parts of one length.
        return RANK_PART if is_rank_number(lower) != is_rank_number(upper) else None

    def known(self, node: cst.CSTNode) -> Value:
        """What a name, or arithmetic on names and literals, holds, from the bindings alone (no events)."""
        if type(node) in (cst.Name, cst.Attribute):
            key = dotted_name(node)
            if key is not None and key in self.env:
                return self.env[key]
            name = node.value if type(node) is cst.Name else node.attr.value
            return Value(rank=Rank(SOME_RANK) if distributed.is_rank_name(name) else None)
        if type(node) is cst.BinaryOperation:
            return Value(rank_derived=RANK_NUMBER) if any(is_rank_number(self.known(part)) for part in (node.left, node.right)) else Value()
        scope = RANK_CALLS.get(self.file.qualify(node.func) or "") if type(node) is cst.Call else None
        return Value(rank=Rank(scope)) if scope is not None else Value()

    def truth_of(self, test: cst.CSTNode, value: Value) -> bool | None:
        """What a test evaluated to `value` is wherever it runs, when known: false for a value that
        never holds, else as its literals say (`static_truth`), else as a constant it was computed to
        (`if not is_distributed(model):` where the function returns True for it)."""
        truth = False if value.always_false else self.static_truth(test)
        if truth is None and value.constant in _NEGATED:
            truth = value.constant == "True"
        return truth

    def static_truth(self, test: cst.CSTNode) -> bool | None:
        """The value of an `if` test on a name known to hold a literal (a parameter the call passed
        `scaler=None` for, or `scaler = None` assigned once): `if scaler is not None:` is dead."""
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            inner = self.static_truth(test.expression)
            return None if inner is None else not inner
        if type(test) is cst.BooleanOperation:
            # `global_rank is not None and dist.is_initialized()` with `global_rank` left None: false.
            sides = (self.static_truth(test.left), self.static_truth(test.right))
            decisive = type(test.operator) is cst.Or  # the value that decides `or` (True) or `and` (False)
            return decisive if decisive in sides else (not decisive if sides == (not decisive, not decisive) else None)
        if type(test) is cst.Comparison and len(test.comparisons) == 1:
            comparison = test.comparisons[0]
            if type(comparison.comparator) is cst.Name and comparison.comparator.value in ("None", "True", "False"):
                known = self.parameter_constant(test.left)  # `if use_fsdp is False:` with `use_fsdp=False` passed
                if known is not None and type(comparison.operator) in (cst.Is, cst.IsNot):
                    return (known == comparison.comparator.value) == (type(comparison.operator) is cst.Is)
            # `if world_size > 1:` where the call passed `world_size=1`
            number = _number(self.parameter_constant(test.left))
            bound = _number(number_literal(comparison.comparator))  # `if rank != -1:` where the call left `rank=-1`
            if number is not None and bound is not None and type(comparison.operator) in _ORDERINGS:
                return _ORDERINGS[type(comparison.operator)](number, bound)
            return None
        known = self.parameter_constant(test)
        number = _number(known)
        return None if known is None else number != 0 if number is not None else known == "True"

    def parameter_constant(self, node: cst.CSTNode) -> str | None:
        """The literal a parameter was passed, a name assigned once was given, or an attribute of
        `self` holds since its constructor (`constructed_attributes`); a literal is itself (`if True:`)."""
        if type(node) is cst.Name and node.value in CONSTANTS:
            return node.value
        if type(node) not in (cst.Name, cst.Attribute):
            return number_literal(node)
        value = self.env.get(dotted_name(node))
        return value.constant if value is not None else None

    def construction(self, receiver: Value, written_call: bool) -> Event | None:
        """The call that built a method's receiver: what its variable was bound to (`trainer =
        Trainer(...)`), or, `written_call`, the call written as the receiver (`Trainer(...).save()`)."""
        if receiver.ref is None:
            built_by = receiver.event if written_call else None
        elif receiver.ref.path:
            return None
        else:
            self.flow.consulted.append(receiver.ref.root)
            built_by = self.flow.origin(receiver, len(self.flow.events))
        return built_by if built_by is not None and built_by.may_construct() else None

    def global_rank(self, node: cst.Name) -> Rank | None:
        """A name a function reads as a global of its module (neither it nor a function around it binds
        it), which the module binds once, at its top level, to the rank (`rank = int(os.environ["RANK"])`
        at the top of a script): that rank, with its scope."""
        function, program = self.function, self.flow.program
        if function is None:
            return None
        qualname = function.qualname
        while qualname:  # a class's body binds no name its methods read
            around = self.file.functions.get(qualname)
            if around is None and qualname not in self.file.classes or around is not None and (
                    node.value in around.params or program.bound_counts(self.file, around)[node.value]):
                return None
            qualname = qualname.rpartition(".")[0]
        written = program.module_global(self.file, node.value)
        return rank_written(self.file, written) if written is not None else None

    def receiver_attributes(self, receiver: Value, self_name: str, written_call: bool = False) -> dict[str, Value]:
        """What a method called on `receiver` knows of its `self.x`: what the caller knows of its own
        `self.x`, and what the receiver's constructor left (`constructed_attributes`)."""
        return {key: value for key, value in self.env.items() if key.startswith("self.")} | \
            self.constructed_attributes(receiver, self_name, written_call)

    def constructed_attributes(self, receiver: Value, self_name: str, written_call: bool = False) -> dict[str, Value]:
        """`loader.load()` where `loader = Loader(config)`, or `Loader(config).load()` (`written_call`):
        what the constructor left in the object's attributes (`constructors.attributes_at`), as
        `self.x` in the method; none where this flow assigned an attribute of the object since, or
        handed it to code it cannot see (an object built in the call itself no other code holds)."""
        if receiver.ref is not None:
            built_by = self.construction(receiver, written_call=False)
        else:
            built_by = self.construction(receiver, written_call=True) if written_call else None
        if built_by is None:
            return {}
        found = self.flow.program.class_of(built_by.file, built_by.node.func)
        known = attributes_at(self.flow.program, *found, built_by.node, built_by.args, built_by.kwargs) if found else {}
        if not known or receiver.ref is not None and (self.flow.handed_on(receiver.ref, built_by.index + 1) or any(
                event.kind == ASSIGN and any(target.root == receiver.ref.root for target in event.targets)
                for event in self.flow.events[built_by.index + 1:])):
            return {}
        return {f"{self_name}.{attribute}": value for attribute, value in known.items()}

    def module_table(self, name: str) -> tuple[FunctionInfo, ...]:
        """The functions of a dispatch table a function reads as a global (`REGISTRY[args.test]()`,
        `REGISTRY = {"a": run_a, ...}` at the top level): the module binds the name once and the function
        not at all, and every value of the dict literal is a function of the run. Else none."""
        program = self.flow.program
        if self.function is None or name in self.function.params or program.bound_counts(self.file, self.function)[name] \
                or program.bound_counts(self.file, None)[name] != 1:
            return ()
        elements = self.file.module_dicts[name].elements
        functions = tuple(program.resolve_callable(self.file, None, element.value) for element in elements if type(element) is cst.DictElement)
        return functions if len(functions) == len(elements) and all(functions) else ()

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
        elif type(node) is cst.Return:
            value = self.expr(node.value, statement, parents) if node.value is not None else Value(constant="None")
            if self.type_tests and not value.type_test:
                value = replace(value, type_test=True)  # `if isinstance(model, FSDP): return True`: the result says what the model is
            self.returned = _returned_on_either_path(self.returned, value) if self.returns else value
            self.returns += 1
            self.note_return(value)
            self.path_ended, self.raised_at = True, None  # what follows in the block does not run (Walker.finish_returns)
        elif type(node) is cst.Assert:
            test = self.expr(node.test, statement, parents)
            if test.rank_test is not None and test.rank_test.pins is not None:
                self.flow.write(Write.ASSERTED_RANK, test.rank_test.pins)  # the other ranks stop here
            self.equal_ranks_asserted(node.test)
            if node.msg is not None:
                self.expr(node.msg, statement, parents)
            self.facts += self.facts_of(node.test, True)  # the rest of the block runs where it held
        elif type(node) is cst.Raise:
            raised_at = len(self.flow.events)
            for child in node.children:
                self.expr(child, statement, parents)
            self.path_ended = True  # what follows in the block never runs (relora's wrap after `raise RuntimeError(...)`)
            self.raised_at = raised_at

    def rank_pinned_to_zero(self, test: cst.CSTNode) -> str | None:
        """The name of the rank that `test` (`rank == 0`, `0 == self.rank`) holds only where it is 0."""
        if type(test) is not cst.Comparison or len(test.comparisons) != 1 or type(test.comparisons[0].operator) is not cst.Equal:
            return None
        for side, other in ((test.left, test.comparisons[0].comparator), (test.comparisons[0].comparator, test.left)):
            name = dotted_name(side)
            held = self.env.get(name) if name is not None else None
            if held is not None and held.rank is not None and not held.rank.formatted and integer_literal(other) == "0":
                return name
        return None

    def equal_ranks_asserted(self, test: cst.CSTNode) -> None:
        """`assert rank == local_rank`: past it, the global rank's variable holds the local rank (on a
        second node the assert fails first)."""
        if type(test) is not cst.Comparison or len(test.comparisons) != 1 or type(test.comparisons[0].operator) is not cst.Equal:
            return
        sides = [(dotted_name(side), self.env.get(dotted_name(side) or "")) for side in (test.left, test.comparisons[0].comparator)]
        scopes = [value.rank.scope if value is not None and value.rank is not None and not value.rank.formatted else None for _, value in sides]
        if set(scopes) == {GLOBAL_RANK, LOCAL_RANK}:
            name, value = sides[scopes.index(GLOBAL_RANK)]
            self.env[name] = replace(value, rank=replace(value.rank, scope=LOCAL_RANK))

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
        if type(target) is cst.Subscript:
            # `config["lr"] = 1e-4`: the dict holds that entry now; under a key the model cannot read, it is
            # no longer what was written.
            key = _string_key(target)
            self.update_entries(target.value, ((key, value, source),) if key is not None and source is not None else None)
        if type(target) in (cst.Attribute, cst.Subscript) and statement is not None:
            assigned = self.ref_of(target)
            if assigned is not None:  # `model.tok_embeddings = new`: a sub-module replaced
                self.emit(ASSIGN, target, statement, parents, targets=(assigned,), value=value)
                made = value.event
                if made is not None and made.kind in (SHARD, WRAP) and made.targets and assigned not in made.targets and assigned.root != "self":
                    # `self.model = FSDP(model)` in `trainer.setup()`: the caller's `trainer.model` holds the
                    # wrapped module, for the methods it calls next (`trainer.train_step()` clips). Not in a
                    # method's own flow, where `self` is no object of a caller: another method of the
                    # class may run before this one (`Program.class_shards` keeps `__init__`'s).
                    self.flow.write(Write.TARGETS, made, made.targets + (assigned,))
            variable = environment_variable(target, self.file)
            if variable is not None:  # `os.environ["MASTER_ADDR"] = "localhost"`
                self.emit(SET_ENV, target, statement, parents, variable=variable, value=value)
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
                self.flow.write(Write.ASSIGNED_ROOT, root)
                self.record_origin(root, value.event)
                derived = self.roots_read(source) - {root} if value.event is None and source is not None else None
                if derived:  # `target = module or self`: one of modules the model cannot tell apart, computed from them
                    self.flow.write(Write.DERIVED, root, derived)
            # A literal kept only for a name assigned once: another assignment, later in a loop, could
            # change it before a test that comes earlier in the text.
            once = root is not None and self.assigned_once(key)
            constant = value.constant if once and value.constant else None
            formula = self.formula_of(source) if source is not None and _is_test(source) else \
                value.formula if value.formula is conditions.GROUP_STARTED else None  # `is_dist = dist.is_initialized()`
            bound = Value(ref=ref, formula=formula, params_of=value.params_of, params_read=value.params_read, iterates=value.iterates, iterates_self=value.iterates_self, elements=value.elements,
                          rank=value.rank, constant=constant, literal=value.constant, rank_test=value.rank_test, visits=value.visits,
                          callees=value.callees, table=value.table, entries=value.entries, built_by=value.built_by, rank_derived=value.rank_derived,
                          world_size=value.world_size, text=value.text if once else None, run_test=value.run_test,
                          dtypes=value.dtypes if once else None, always_false=value.always_false and once, type_test=value.type_test,
                          none_on_some_ranks=value.none_on_some_ranks, partial_of=value.partial_of)
            if root and value.built_by:
                self.flow.write(Write.INSTANCE, root, value.built_by)
        self.env[key] = bound
        if value.event is not None and value.event.binding is None:
            self.flow.write(Write.BINDING, value.event, bound.ref)
            if value.event.kind in (SHARD, WRAP) and not value.event.targets and bound.ref:
                self.flow.write(Write.TARGETS, value.event, (bound.ref,))  # `model = FSDP(Model(...))`: the wrapped module is the result
                if value.event.args and not bound.ref.path:
                    self.record_origin(bound.ref.root, value.event.args[0].event)
            if value.event.kind == OPTIMIZER and bound.ref:
                self.flow.write(Write.OPTIMIZER_BINDING, bound.ref)
        if statement is not None and bound.ref is not None and (self.meta_depth or value.event and value.event.kind == META):
            self.emit(META, target, statement, parents, targets=(bound.ref,))

    def forget_entries(self, node: cst.CSTNode) -> None:
        """The dict a name or attribute holds may have changed: its entries are no longer known, under
        any name that holds it."""
        self.update_entries(node, None)

    def update_entries(self, node: cst.CSTNode, added: tuple | None) -> None:
        """The dict a name or attribute holds took in `added` (`config.update(cuda_kwargs)`), under any
        name that holds it: a key it held keeps its place with the new value, a new key comes last, as
        Python's dict does. Where what it took is not known (None), its entries are not either."""
        key = dotted_name(node)
        held = self.env.get(key) if key is not None else None
        if held is None or held.entries is None or held.ref is None:
            return
        entries = None
        if added is not None:
            merged = {entry[0]: entry for entry in held.entries}
            merged.update((entry[0], entry) for entry in added)
            entries = tuple(merged.values())
        for name, value in list(self.env.items()):
            if value.entries is not None and value.ref is not None and value.ref.root == held.ref.root:
                self.env[name] = replace(value, entries=entries)

    def rebinds(self, name: str, source: cst.CSTNode | None) -> bool:
        """Whether binding `name` makes a new object of it: it was bound before (or is a parameter) and
        the new value is not computed from the old (`model = nn.Sequential(...)`, not `model = wrap(model)`)."""
        previous = self.env.get(name)
        if previous is None:
            return self.depth == 0 and self.function is not None and name in self.function.params
        return previous.ref is None or source is None or previous.ref.root not in self.roots_read(source)

    def record_origin(self, root: str, event: Event | None) -> None:
        if event is None or event.kind not in (CALL, METHOD, CALL_VALUE, META):
            return
        if event.kind == CALL and event.qname in distributed.COPIES and event.args and event.args[0].ref:
            # A copy is built by what built the original, and holds what it holds.
            self.flow.consulted.append(event.args[0].ref.root)
            built_by = self.flow.constructed.get(event.args[0].ref.root)
            if built_by:
                self.flow.write(Write.CONSTRUCTED, root, built_by[-1])
            self.flow.write(Write.COPIED, root, event.args[0].ref)
            return  # a new object, no part of the original
        elif event.kind in (CALL, META) and event.qname:
            self.flow.write(Write.CONSTRUCTED, root, event)
        # `get_module(model, path)`, `model.get_submodule(path)`; and, for a call written here (not one
        # returned by an inlined function, whose names are the callee's), `getattr(model, "embed")()`.
        sources = {ref.root for ref in event.arg_refs()} | ({event.target.root} if event.kind == METHOD and event.target else set())
        if event.chain == self.chain:
            sources |= self.roots_read(event.node) - {root}
        if sources:
            # `model = load_state(model, ...)`: still the object it was, with what it was made from.
            self.flow.write(Write.DERIVED_MORE if root in sources else Write.DERIVED, root, sources)

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
            elif type(node) in (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp):
                # What its elements come from: its first iterable, read where it is written (the
                # names the comprehension binds are its own).
                pending.append(node.for_in.iter)
            elif type(node) is not cst.Lambda:
                pending += subexpressions(node)
        return roots

    def sources_of(self, node: cst.CSTNode) -> set[str]:
        """The roots an expression reads, and for each the objects it may be (where paths met): what an
        element of an iterable built elsewhere in the function may come from (halite's `block_iterator`,
        a comprehension over `model.blocks` on one path and `block_iterator(model)` on the other); what
        those were computed from, a reader follows (`Flow.computed_from`): written here, those roots of
        the caller's would keep a callee's walk from being copied into another call."""
        roots = self.roots_read(node)
        for root in list(roots):
            for one in self.flow.alternatives(Ref(root)):
                roots |= {one.root}
        return roots

    def ref_of(self, node: cst.CSTNode) -> Ref | None:
        key = dotted_name(node)
        if key is not None and key in self.env:
            return self.env[key].ref
        if type(node) is cst.Name:
            name = node.value
            if name in self.file.imports or name in BUILTINS or name in self.file.functions:
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
        step = SELF_OR_BELOW if iterable.iterates and iterable.iterates_self else ANY_ELEMENT
        return Value(ref=source.child(step) if source else None, params_of=iterable.params_of)

    def expr(self, node: cst.CSTNode, statement: cst.CSTNode, parents: tuple, with_item: bool = False) -> Value:
        self.flow.steps += 1
        if self.flow.steps > FLOW_BUDGET:
            raise BudgetExhausted
        if type(node) is cst.Name and node.value in CONSTANTS:
            return Value(constant=node.value)
        if (number := number_literal(node)) is not None:
            return Value(constant=number)
        if type(node) is cst.SimpleString:
            text = string_value(node)
            return Value(text=text if isinstance(text, str) else None)
        if type(node) in (cst.Name, cst.Attribute):
            key = dotted_name(node)
            if key is not None and key in self.env:
                return self.env[key]
            dtype = distributed.TORCH_DTYPES.get(self.file.qualify(node))
            if dtype is not None:
                return Value(dtypes=frozenset({dtype}))  # `torch.float16`
            if type(node) is cst.Attribute:
                base = self.expr(node.value, statement, parents)
                if base.built_by is not None and base.ref is not None and not base.ref.path:
                    # `state.model` where `state = TrainState(model)`: what its constructor left there
                    held = self.constructed_attributes(base, "").get("." + node.attr.value)
                    if held is not None:
                        return held
                if self.reads_sharding(node.attr.value, base):
                    return Value(ref=self.ref_of(node), type_test=True)
            # An unassigned name or attribute says by its name whether it is a rank (`self.global_rank`).
            name = node.value if type(node) is cst.Name else node.attr.value
            if type(node) is cst.Name and name in self.file.module_dicts:
                table = self.module_table(name)
                if table:
                    return Value(table=table)
            if type(node) is cst.Name and (name in self.file.functions or name in self.file.imports):
                function = self.flow.program.resolve_callable(self.file, self.function, node)
                if function is not None:
                    return Value(callees=(function,))
            written = self.global_rank(node) if type(node) is cst.Name else None
            if written is not None:
                self.read_rank(True)
                return Value(ref=self.ref_of(node), rank=written)
            flag, rank = distributed.is_main_process_flag(name), distributed.is_rank_name(name)
            self.read_rank(rank)
            return Value(ref=self.ref_of(node), rank=Rank(SOME_RANK) if rank else None,
                         rank_test=RankTest(True, True) if flag else None, world_size=distributed.is_world_size_name(name))
        if type(node) is cst.Subscript:
            base = self.expr(node.value, statement, parents)
            for element in node.slice:
                self.expr(element, statement, parents)
            index = node.slice[0].slice if len(node.slice) == 1 else None
            if type(index) is cst.Index and self.file.qualify(node.value) == "os.environ":  # os.environ["LOCAL_RANK"]
                rank = rank_variable(index.value)
                self.read_rank(rank is not None)
                return Value(rank=rank, world_size=is_world_size_variable(index.value))
            element = None
            if base.ref is not None and type(index) is cst.Index:  # `model.layers[0]`: one direct element
                literal = type(index.value) in (cst.Integer, cst.SimpleString)
                element = Element(base.ref, index.value.value if literal else "?")
            return Value(ref=base.ref.child("[]") if base.ref else None, callees=base.table, element=element, rank_derived=self.part_by_rank(index),
                         dtypes=_dtypes_taken(base, string_value(index.value) if type(index) is cst.Index and type(index.value) is cst.SimpleString else None))
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
            if operator == "or" and left.constant in ("None", "False") or operator == "and" and left.constant == "True":
                return right  # `target = module or self` where `module` was left None: `self`
            if operator == "or" and right.constant == "None":
                return _not_none(left, right)  # `head or None`
            if operator == "or" and right.elements == ():
                return left  # `modules or []`: its elements, or none to visit
            # `model.backbone or model.model`: one of the two modules.
            either = _either([left.ref, right.ref]) if operator == "or" else None
            if left.run_test and right.run_test:  # `dist.is_available() and dist.is_initialized()`
                return Value(run_test=True)
            # `not dist.is_initialized() or rank == 0`: where there is no process group there is one
            # process, and where there is one, every rank sees it: the whole differs between ranks as the rank test does.
            if left.run_test or right.run_test:
                rank_test = left.rank_test or right.rank_test
            else:
                rank_test = RankTest.combine(operator, left.rank_test, right.rank_test)
            return Value(ref=either, params_of=refs_of((left, right)), rank_test=rank_test, type_test=left.type_test or right.type_test)
        if type(node) is cst.IfExp:
            test = self.expr(node.test, statement, parents)
            truth = self.truth_of(node.test, test)
            if truth is not None:
                # `x if outer is not None else None` with `outer` left None: the other side never runs
                with self.holding(node.test, truth):
                    return self.expr(node.body if truth else node.orelse, statement, parents)
            with self.holding(node.test, True):
                body = self.expr(node.body, statement, parents)
            with self.holding(node.test, False):
                orelse = self.expr(node.orelse, statement, parents)
            # `model.model if hasattr(model, "model") else model.esm`: one of the two modules, as with `or`
            return _not_none(body, orelse) or Value(ref=_either([body.ref, orelse.ref]), params_of=refs_of((test, body, orelse)), rank=_rank_of_either((body, orelse)),
                                                    dtypes=body.dtypes | orelse.dtypes if body.dtypes and orelse.dtypes else None)
        if type(node) is cst.UnaryOperation and type(node.operator) is cst.Not:
            operand = self.expr(node.expression, statement, parents)
            tested = _truth_test(operand)
            return Value(rank_test=tested.negated() if tested else None, run_test=operand.run_test, type_test=operand.type_test,
                         constant=_NEGATED.get(operand.constant))
        if type(node) in (cst.Tuple, cst.List):
            elements = tuple(self.expr(element.value, statement, parents) for element in node.elements)
            params = refs_of(elements)
            visits = tuple(self.element_of(value) if type(element) is cst.StarredElement else value
                           for element, value in zip(node.elements, elements))
            return Value(params_of=params, params_read=reads_of(elements), elements=elements, iterates=_common_ref([e.ref for e in elements]),
                         visits=visits)
        if type(node) is cst.FormattedString:
            parts = [self.expr(part, statement, parents) for part in subexpressions(node)]
            texts = iter(UNKNOWN_PART if part.text is None else part.text for part in parts)
            text = "".join(part.value if type(part) is cst.FormattedStringText else next(texts) for part in node.parts)
            return Value(rank=_formatted_rank(parts), text=text)
        # Anything else: evaluate the parts and pass parameter flows through (dicts, operators, f-strings).
        parts = [self.expr(part, statement, parents) for part in subexpressions(node)]
        params = refs_of(parts)
        if type(node) is cst.ConcatenatedString or type(node) is cst.BinaryOperation and type(node.operator) is cst.Add and any(part.text or part.rank and part.rank.formatted for part in parts):
            return Value(params_of=params, text="".join(UNKNOWN_PART if part.text is None else part.text for part in parts),  # `"tcp://" + host`
                         rank=_formatted_rank(parts))
        if type(node) is cst.BinaryOperation and (type(node.operator) is cst.Modulo and parts[0].text is not None
                                                  or type(node.operator) is cst.Divide and any(part.rank and part.rank.formatted for part in parts)):
            return Value(params_of=params, rank=_formatted_rank(parts))  # `"model_%d.pt" % rank`, `Path(root) / f"{rank}.pt"`
        if type(node) is cst.BinaryOperation and any(is_rank_number(part) for part in parts):
            return Value(params_of=params, rank_derived=RANK_NUMBER)  # `n + rank`, `rank * per_rank`
        if type(node) is cst.BinaryOperation and any(part.world_size for part in parts):
            return Value(params_of=params, world_size=True)  # `global_batch // world_size`: computed from it
        if type(node) is cst.Dict and node.elements and all(type(element) is cst.DictElement for element in node.elements):
            keys, entries = parts[0::2], parts[1::2]  # keys and values alternate
            table = tuple(entry.callees[0] for entry in entries) if all(len(entry.callees) == 1 for entry in entries) else ()
            named = all(key.text is not None and UNKNOWN_PART not in key.text for key in keys)
            return Value(params_of=params, params_read=reads_of(parts), table=table, entries=tuple((key.text, entry, element.value) for key, entry, element in zip(keys, entries, node.elements))
                         if named else None)
        return Value(params_of=params, params_read=reads_of(parts))

    def reads_sharding(self, attribute: str, owner: Value) -> bool:
        """`handle.uses_sharded_strategy`, or `model.sharding_strategy` of a module an FSDP1 wrap manages:
        whether the module shards, which the model cannot say where the code tests it (a
        `Value.type_test`: easy-to-hard's copy of torch's `clip_grad_norm_`, `if all_no_shard:` over
        `_all_handles`, clips locally only where no handle shards)."""
        if attribute == distributed.HANDLE_SHARDING_ATTRIBUTE:
            return True
        if attribute != distributed.MODULE_SHARDING_ATTRIBUTE or owner.ref is None:
            return False
        self.flow.asked_sharding.append(owner.ref.root)
        return self.flow.sharding_of(owner.ref, len(self.flow.events), fsdp=1) is not None

    def comparison(self, node: cst.Comparison, statement: cst.CSTNode, parents: tuple) -> Value:
        """`rank == 0`, `dist.get_rank() != 0`, `local_rank in (-1, 0)`: true on some ranks only.
        The same on every rank: `local_rank == -1` and `os.environ.get("RANK") is None` (launched
        distributed or not), `rank >= 0` and `rank < 0` (no rank is negative). `rank in group_ranks`
        (a collection that is no literal) and `offset <= rank < offset + size` ask whether this rank
        is in a group, whose ranks then work together, as Megatron's pipeline stages do: no rank
        test either; nor is a comparison of two sides that each differ between ranks."""
        values = [self.expr(part, statement, parents) for part in subexpressions(node)]
        params = refs_of(values)
        operator = type(node.comparisons[0].operator) if len(node.comparisons) == 1 else None
        if operator is cst.Equal and _never_equal(*values):
            return Value(params_of=params, always_false=True)  # `dtype == "float16"` where `dtype` is a torch dtype
        if operator in (cst.Equal, cst.NotEqual) and (same := _same_text(*values)) is not None:
            # `device == "cuda"` in a call given `device="cuda"` (minifsdp's `init_process`): known either way
            return Value(params_of=params, constant=str(same == (operator is cst.Equal)))
        if operator in (cst.Is, cst.IsNot, cst.Equal, cst.NotEqual) and len(values) == 2 and \
                any(value.none_on_some_ranks for value in values) and any(value.constant == "None" for value in values):
            return Value(params_of=params, rank_test=RankTest(True, True))  # `state is None`, where the state is None on some ranks
        if operator in (cst.Is, cst.IsNot) and len(values) == 2 and values[1].constant == "None" and self.file.qualify(node.left) in FSDP_CLASSES:
            # `FSDP is not None`, of `try: from torch.distributed.fsdp import FullyShardedDataParallel as FSDP`
            # `except ImportError: FSDP = None`: an object of the class exists only where the import
            # worked, and what the rules ask of a module is asked of those.
            return Value(params_of=params, constant=str(operator is cst.IsNot))
        if any(value.type_test for value in values):
            return Value(params_of=params, type_test=True)  # `model.sharding_strategy == ShardingStrategy.NO_SHARD`
        compares_rank = any(value.rank is not None for value in values)
        # Two sides that each differ between ranks (`local_rank != other` where `other = local_rank`, or
        # `shard_id` computed from the rank) may agree on every rank: which ranks pass is not known.
        varies = [value.rank is not None or value.rank_derived is not None for value in values]
        if len(values) == 2 and all(varies):
            return Value(params_of=params)
        same_everywhere = any(type(target.operator) in (cst.Is, cst.IsNot)
                              or type(target.operator) in (cst.Equal, cst.NotEqual) and integer_literal(target.comparator) == "-1"
                              or is_sign_test(target)
                              or type(target.operator) in (cst.In, cst.NotIn) and type(target.comparator) not in LITERAL_COLLECTIONS
                              for target in node.comparisons) or is_group_range(node)
        if not compares_rank or same_everywhere or len(values) == 2 and any(map(self.takes_turns, (node.left, node.comparisons[0].comparator), values)):
            return Value(params_of=params)
        return Value(params_of=params, rank_test=RankTest(True, True, pins=_pinned_scope(node, values)))

    def takes_turns(self, side: cst.BaseExpression, value: Value) -> bool:
        """`i % world_size` (`value` its value): whose turn it is, round the ranks as `i` counts. `if i %
        world_size != rank: continue` gives each rank its share of the items (nanoGPT's HellaSwag
        evaluation), and every rank runs what follows in its own turns: it keeps no rank out."""
        if type(side) is not cst.BinaryOperation or type(side.operator) is not cst.Modulo or not value.world_size:
            return False
        counted = self.env.get(dotted_name(side.left) or "")
        return counted is None or not counted.world_size  # the world size is the divisor, not what is divided

    def rank_meaning(self, node: cst.Call, value: Value) -> Value:
        """What a call's result says of the rank, by the callee's name: `dist.get_rank()`,
        `get_local_rank()`, `is_main_process()`, `os.environ.get("RANK")`."""
        if value.rank is not None or value.rank_test:
            return value  # an inlined function returned it, `int(rank)`, `dist.get_rank()`, `os.environ.get("RANK")`
        qname = self.file.qualify(node.func)
        if qname in distributed.DISTRIBUTED_RUN_TESTS:
            # A name bound to `dist.is_initialized()` is that test where an `if` reads it.
            return dataclasses.replace(value, run_test=True, formula=conditions.GROUP_STARTED if qname in distributed.PROCESS_GROUP_QUERIES else None)
        # `Cluster().get_rank()`: a method of an object, by the method's name.
        method = node.func.attr.value if type(node.func) is cst.Attribute else ""
        name = (qname or dotted_name(node.func) or method).rsplit(".", 1)[-1]
        getter, flag = distributed.is_rank_getter(name), distributed.is_main_process_flag(name)
        # A function of this run is judged by what it returns (inlined), not by its name.
        if (getter or flag) and self.flow.program.resolve_function(self.file, self.function, node) is None:
            return dataclasses.replace(value, rank=Rank(SOME_RANK) if getter else None, rank_test=RankTest(True, True) if flag else None)
        if distributed.is_world_size_name(name) and not value.world_size and self.flow.program.resolve_function(self.file, self.function, node) is None:
            return dataclasses.replace(value, world_size=True)
        return value

    def comprehension(self, node: cst.BaseComp, statement: cst.CSTNode, parents: tuple) -> Value:
        """What the elements carry: `{k: v.full_tensor() for k, v in sd.items()}` carries no shards."""
        clause = node.for_in
        while clause is not None:
            iterable = self.expr(clause.iter, statement, parents)
            # As in a `for` loop, the target is an element of what is iterated (`b` in
            # `[fully_shard(b) for b in model.layers]` is a sub-module of `model`).
            element = self.element_of(iterable)
            self.bind(clause.target, Value(ref=element.ref, params_of=iterable.params_of, params_read=iterable.params_read,
                                           iterates=None if element.ref else iterable.iterates))
            for condition in clause.ifs:
                self.expr(condition.test, statement, parents)
            clause = clause.inner_for_in
        parts = (node.key, node.value) if type(node) is cst.DictComp else (node.elt,)
        values = [self.expr(part, statement, parents) for part in parts]
        params = refs_of(values)
        # `[m for m in model.layers if ...]` still iterates sub-modules of `model`.
        return Value(params_of=params, params_read=reads_of(values), iterates=_common_ref([value.ref for value in values]),
                     type_test=any(value.type_test for value in values))

    def call(self, node: cst.Call, statement: cst.CSTNode, parents: tuple, with_item: bool) -> Value:
        value = self.rank_meaning(node, self._call(node, statement, parents, with_item))
        self.read_rank(value.rank is not None)
        return value

    def _call(self, node: cst.Call, statement: cst.CSTNode, parents: tuple, with_item: bool) -> Value:
        func = node.func
        receiver = self.expr(func.value, statement, parents) if type(func) is cst.Attribute else Value()
        args = tuple(self.expr(arg.value, statement, parents) for arg in node.args if arg.keyword is None and not arg.star)
        kwargs = {arg.keyword.value: self.expr(arg.value, statement, parents) for arg in node.args if arg.keyword is not None} or NO_KEYWORDS
        spread = [self.expr(arg.value, statement, parents) for arg in node.args if arg.star == "**"]
        # `f(**config)` of a dict written out: the keywords it gives the function called, each with the
        # expression written in the dict (what its events show as the argument), and every argument is known.
        known = all(arg.star != "*" for arg in node.args) and all(value.entries is not None for value in spread)
        spread_entries = [entry for value in spread for entry in value.entries] if known else None
        qname = self.file.qualify(func)
        held = self.env.get(dotted_name(func) or "") if qname is None and type(func) in (cst.Name, cst.Attribute) else None
        if held is not None and held.partial_of is not None and held.entries is not None and spread_entries is not None:
            # `shard = partial(fully_shard, mesh=mesh)`, then `shard(block)`: `fully_shard(block, mesh=mesh)`,
            # its keywords as from a dict written out where the partial was made
            qname, spread_entries = held.partial_of, [*held.entries, *spread_entries]
        spread_keywords = {key: entry for key, entry, _ in spread_entries} if known else None
        self.spread = (node, spread_keywords) if known else None
        if spread_keywords:
            kwargs = spread_keywords | kwargs
        for arg in node.args:
            if not arg.star:
                self.forget_entries(arg.value)  # a function given the dict may change it
        flowing = refs_of((*args, *kwargs.values()))
        if qname is not None and qname.rsplit(".", 1)[-1] in self.patched:
            qname = None  # a test replaced it (`monkeypatch.setattr(mod, "fully_shard", fake)`): a call of unknown code
        common = dict(statement=statement, parents=parents, qname=qname, args=args, kwargs=kwargs, with_item=with_item,
                      spread=MappingProxyType({key: written for key, _, written in spread_entries}) if spread_entries else NO_SPREAD)

        if qname == "functools.partial" and node.args and node.args[0].keyword is None and not node.args[0].star \
                and all(arg.keyword is not None for arg in node.args[1:]):
            target = self.file.qualify(node.args[0].value)
            if target is not None and self.flow.program.resolve_callable(self.file, self.function, node.args[0].value) is None:
                return Value(event=self.emit(CALL, node, **common), partial_of=target,
                             entries=tuple((arg.keyword.value, kwargs[arg.keyword.value], arg.value) for arg in node.args[1:]))
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
        if qname in _SETS_ENVIRONMENT and args and args[0].text is not None and UNKNOWN_PART not in args[0].text:
            # `os.environ.setdefault("CUDA_VISIBLE_DEVICES", ...)`, `os.putenv(...)`: as `os.environ[...] = ...`
            self.emit(SET_ENV, node, variable=args[0].text, value=args[1] if len(args) > 1 else Value(),
                      only_if_unset=qname == "os.environ.setdefault", **common)
            return Value(params_of=flowing)
        if qname is None and type(func) is cst.Name and func.value == "dict" and not args and all(arg.keyword is not None for arg in node.args):
            return Value(params_of=flowing, entries=tuple((arg.keyword.value, kwargs[arg.keyword.value], arg.value) for arg in node.args))  # `dict(lr=1e-3, epochs=1)`
        if qname in _BUILDS_PATHS or qname is None and (type(func) is cst.Name and func.value == "str" or type(func) is cst.Attribute
                                                         and func.attr.value == "format" and receiver.text is not None):
            # `os.path.join(root, f"{rank}.pt")`, `"shard_{}.pt".format(rank)`, `str(rank)`: a string formatted from the rank
            rank = _formatted_rank((receiver, *args, *kwargs.values()))
            if rank is not None:
                return Value(params_of=flowing, rank=rank)
        if qname is None and type(func) is cst.Name and func.value in _ITERABLE_WRAPPERS and args:
            each_of = (args[0].each_of or (args[0].ref if args[0].iterates is None else None)) if func.value in _VISITS_EVERY_ELEMENT else None
            return Value(iterates=args[0].iterates or args[0].ref, iterates_self=args[0].iterates_self, params_of=flowing,
                         visits=_visits_through(func.value, args), each_of=each_of)
        if qname == "itertools.chain" and args and not any(arg.star for arg in node.args):
            parts = [arg.visits if arg.visits is not None else (self.element_of(arg),) for arg in args]
            return Value(iterates=_common_ref([arg.iterates or arg.ref for arg in args]), params_of=flowing,
                         visits=tuple(visit for part in parts for visit in part))
        if self.builds_on_meta(node):
            # The constructor is kept: what built it (`te.LayerNormLinear`, a single layer) still says what it is.
            return Value(event=Event(META, node, self.file, statement, parents, self.chain, qname=qname))
        callee = self.flow.program.resolve_function(self.file, self.function, node)
        runs_it = receiver
        if callee is None and type(func) is cst.Attribute:
            wrap = self.fsdp1_wrap_of(receiver, func.attr.value)
            if wrap is not None:  # `self` is the module the wrap holds, `model.module`, built as the wrap's argument was
                runs_it = Value(ref=receiver.ref.child("module"))
                callee = self.method_of_object(wrap.args[0], wrap.index, func.attr.value)
            else:
                callee = self.method_of_instance(func, receiver)
            if callee is not None and receiver.ref is not None:  # still a method call on a tracked value, as rules read it (`model.forward(x)`)
                self.emit(METHOD, node, targets=(receiver.ref,), method=func.attr.value, **common)
        if callee is not None:
            return self.inline(callee, node, args, kwargs, runs_it, statement, parents)
        if type(func) in (cst.Subscript, cst.Call) or type(func) is cst.Name and func.value in self.env:
            return self.call_value(node, args, kwargs, statement, parents)
        if type(func) is cst.Attribute and qname is None and func.attr.value == "get" and receiver.table:
            return Value(callees=receiver.table)  # `table.get(key)`: one of its functions
        # Parameters handed over directly, not an existing optimizer handed to a helper.
        handed = refs_of(v for v in (*args, *kwargs.values()) if v.ref not in self.flow.optimizer_bindings)
        if self.is_optimizer(qname, node, handed):
            event = self.emit(OPTIMIZER, node, params_of=handed, **common)
            return Value(event=event, params_of=handed)
        if type(func) is cst.Attribute and receiver.ref is not None and qname is None:
            method = func.attr.value
            # The wrapper itself, not the module it wraps (one ref for both): only the wrapper has FSDP1's methods.
            wrapper = receiver if receiver.event is not None and receiver.event.kind is WRAP else None
            event = self.emit(METHOD, node, targets=(receiver.ref,), method=method, value=wrapper, **common)
            applied = self.applied_function(node, args, kwargs) if method == "apply" else None
            if applied is not None:
                # `model.apply(fn)`: `nn.Module.apply` calls `fn` on each sub-module and the module itself,
                # as `for m in model.modules(): fn(m)` would (children first; dllm-distillation's VeOmni
                # `model.apply(shard_blocks)`, which shards the blocks it picks before the root)
                self.inline(applied, node, (Value(ref=receiver.ref.child(SELF_OR_BELOW)),), NO_KEYWORDS, Value(), statement, parents)
            if method in _COLLECTS and not receiver.ref.path:
                # `modules.append(module)` in a loop over `model.named_modules()`: the list's elements come from `model`.
                self.flow.write(Write.DERIVED_MORE, receiver.ref.root, set().union(*(self.roots_read(arg.value) for arg in node.args)))
            if method == "update":
                self.update_entries(func.value, _entries_given(node, args, kwargs))  # `train_kwargs.update(cuda_kwargs)`
            elif method not in _READS_A_DICT:
                self.forget_entries(func.value)  # `config.pop(...)`
            if method in _PARAMETER_METHODS:
                return Value(params_of=frozenset({receiver.ref}), event=event)
            if method in _ITERATES_SUBMODULES:
                # `self.layers.values()` yields sub-modules; a dict's `.items()` what it holds (`{n: p for n, p in
                # model.named_parameters()}.values()`, nanoGPT's `configure_optimizers`; a state dict's tensors)
                return Value(iterates=receiver.ref, iterates_self=method in _ITERATES_SELF_FIRST, event=event,
                             each_of=receiver.ref if method in _ITERATES_ELEMENTS else None,
                             params_of=receiver.params_of, params_read=receiver.params_read)
            if method in RETURNS_SELF:  # the same object, holding what it held (`v.cpu()` of a state dict's DTensor is one)
                return Value(ref=receiver.ref, event=event, params_of=receiver.params_of, params_read=receiver.params_read)
            if method == "state_dict":
                return Value(event=event, params_of=receiver.params_of | {receiver.ref}, params_read=() if receiver.params_of else (event,))
            if method in _GATHERS:
                return Value(event=event)
            return Value(event=event, params_of=receiver.params_of, params_read=receiver.params_read)  # `state.items()`, `state.copy()`
        if (type(func) is cst.Attribute and qname is None and func.attr.value in RETURNS_SELF
                and receiver.event is not None and (receiver.event.kind == CALL or receiver.event.kind == CALL_VALUE and receiver.built_by)):
            # `nn.Linear(4, 4).to(device)` is still the module `nn.Linear(...)` built, and `Transformer().cuda()`
            # the object of the file's class (whose methods a call on it runs: llama2.c's
            # `model.configure_optimizers(...)`); the move is a call of its own, with its device.
            self.emit(CALL, node, **{**common, "qname": dotted_name(func)})
            return receiver
        callee_ref = self.ref_of(func) if qname is None else None
        if callee_ref is not None:
            # `TinyLM(...)`: a name of no function of the run, nor imported: a class of the file, by its name.
            return Value(event=self.emit(CALL_VALUE, node, targets=(callee_ref,), **common), built_by=func.value if type(func) is cst.Name else None)
        event = self.emit(CALL, node, **{**common, "qname": qname or dotted_name(func)})
        tested = self.sharding_test(node, args, event, flowing) if qname is None and type(func) is cst.Name and func.value == "isinstance" else None
        if tested is not None:
            return tested
        if qname is None and type(func) is cst.Name and func.value in ("any", "all") and len(args) == 1 and args[0].type_test:
            return Value(event=event, type_test=True)  # `any(isinstance(p, DTensor) for p in model.parameters())`
        taken = self.attribute_taken(node, args) if qname is None and type(func) is cst.Name and func.value == "getattr" else None
        if taken is not None:
            return Value(ref=taken, event=event)
        if qname in distributed.PROGRESS_BARS and args:
            # `enumerate(tqdm(loader))`, `for layer in tqdm(model.layers)`: a progress bar visits what it wraps, every element in order
            return Value(event=event, iterates=args[0].iterates or args[0].ref, iterates_self=args[0].iterates_self, params_of=flowing,
                         visits=args[0].visits, each_of=args[0].each_of or (args[0].ref if args[0].iterates is None else None))
        if qname is not None and distributed.is_state_dict_getter(qname) and args and args[0].ref is not None \
                and self.flow.full_state_dict(event) is False:
            state = Value(event=event, params_of=frozenset({args[0].ref}), params_read=(event,))  # the module's sharded state, as `model.state_dict()` is
            if qname.rsplit(".", 1)[-1] == "get_state_dict":
                # `model_sd, optim_sd = get_state_dict(model, optimizers)`: the pair, the model's first
                return dataclasses.replace(state, elements=(state, Value(event=event)))
            return state
        if qname in distributed.RETURNS_ITS_MODULE and args and args[0].ref is not None:
            return args[0]  # `model = parallelize_module(model, ...)` is still `model`
        if qname is None and type(func) is cst.Attribute and receiver.params_of and func.attr.value in _KEEPS_WHAT_IT_HOLDS:
            # `model.state_dict().items()`, `get_state().copy()`: what a call's value held, as of a variable's above
            return Value(event=event, params_of=receiver.params_of, params_read=receiver.params_read)
        built_by = qname if qname is not None else receiver.built_by if type(func) is cst.Attribute and func.attr.value in RETURNS_SELF else None
        # `str(host)` of a string is that string (nvidia-resiliency-ext's `MASTER_ADDR = str(host)`).
        text = args[0].text if qname is None and type(func) is cst.Name and func.value == "str" and len(node.args) == 1 \
            and not node.args[0].keyword and not node.args[0].star else None
        return Value(event=event, params_of=flowing if qname is None else NO_REFS, params_read=reads_of(args) if qname is None and not kwargs else (), rank=rank_of_call(qname, func, node, args), built_by=built_by,
                     constant="None" if qname in distributed.RETURNS_NONE else None, text=text,
                     rank_derived=rank_derived_of_call(qname, func, node, args), world_size=world_size_of_call(qname, func, node, args))

    def one_object(self, passed: cst.Name) -> bool:
        """An imported name whose object the model names as the caller does: a class of the run, or an
        object from a module no file of the run is (a module of the run's constants, given to every
        version check, would be named in each callee's walk by a name no copy of it can map)."""
        if self.flow.program.class_of(self.file, passed, through_packages=True) is not None:
            return True
        return not self.flow.program.may_define_module(self.file.imports[passed.value].rpartition(".")[0])

    def names_alike(self, other: FileModel, name: str) -> bool:
        """The name this file imports means the same in `other` or nothing there: the same import, or
        no import, top-level binding, function or class of that name (a test of `name.x` in `other`'s
        code is then of this object, not of one of its own)."""
        theirs = other.imports.get(name)
        if theirs is not None:
            return theirs == self.file.imports.get(name)
        return name not in other.classes and name not in other.functions and name not in self.flow.program.bound_counts(other, None)

    def applied_function(self, node: cst.Call, args: tuple[Value, ...], kwargs: Mapping[str, Value]) -> FunctionInfo | None:
        """The function of the run `module.apply(fn)` is given, where `fn` is one (a value that calls one
        function, or a name of one), not a method: its object would not be known."""
        if len(args) != 1 or kwargs or len(node.args) != 1:
            return None
        function = args[0].callees[0] if len(args[0].callees) == 1 else \
            self.flow.program.resolve_callable(self.file, self.function, node.args[0].value) if not args[0].callees else None
        return function if function is not None and function.class_name is None else None

    def sharding_test(self, node: cst.Call, args: tuple[Value, ...], event: Event, flowing: frozenset[Ref]) -> Value | None:
        """`isinstance(x, C)` where C (or each class of a tuple) is an FSDP module class or DTensor: false
        of a module the flow constructed and has not sharded, wrapped or handed on (physicsnemo's
        `is_distributed = isinstance(model, FSDPModule)` of a plain model); of a module the flow shards,
        as far as the model knows, it holds; of anything else it is a test the model cannot answer
        (`Value.type_test`). None for any other `isinstance`."""
        if len(node.args) != 2:
            return None
        classes = [self.file.qualify(name) for name in isinstance_classes(node)]
        if not all(name in FSDP_CLASSES or name in distributed.DTENSOR_CLASSES for name in classes):
            return None
        ref = args[0].ref if args else None
        if ref is None:
            return Value(event=event, params_of=flowing, type_test=True)
        self.flow.asked_sharding.append(ref.root)
        if len(args) == 2 and all(name in FSDP_CLASSES for name in classes) and self.flow.plain_module(ref, len(self.flow.events)):
            return Value(event=event, always_false=True)
        if self.flow.sharding_of(ref, len(self.flow.events), fsdp=None) is None:
            return Value(event=event, params_of=flowing, type_test=True)
        if set(classes) == {FSDP1_WRAPPER} and self.flow.sharding_of(ref, len(self.flow.events), fsdp=2) is not None:
            # `fully_shard` makes the module an FSDPModule in place, never a FullyShardedDataParallel
            # (ezpz's `is_fsdp = isinstance(model, FSDP)` of an FSDP2 model, under which FSDP1 API runs)
            return Value(event=event, always_false=True)
        # physicsnemo's `if isinstance(model, (FSDP, FSDPModule)): return True` of the model the flow shards
        return Value(event=event, params_of=flowing, constant="True" if all(name in FSDP_CLASSES for name in classes) else None)

    @staticmethod
    def attribute_taken(node: cst.Call, args: tuple[Value, ...]) -> Ref | None:
        """`getattr(model, "backbone")` is `model.backbone`; with a default, one of the two
        (`getattr(model, "backbone", model.model)`: a module one step below `model`)."""
        if len(args) not in (2, 3) or len(node.args) != len(args) or args[0].ref is None or args[1].text is None:
            return None
        taken = args[0].ref.child(args[1].text)
        return taken if len(args) == 2 or args[2].constant == "None" else _either([taken, args[2].ref])

    @staticmethod
    def is_meta_literal(node: cst.CSTNode) -> bool:
        return type(node) is cst.SimpleString and string_value(node) == "meta"

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

    def fsdp1_wrap_of(self, receiver: Value, method: str) -> Event | None:
        """The FSDP1 wrap the receiver is (`model = FSDP(model)`), where `method` is none of the wrap's
        own (`distributed.FSDP1_OWN_METHODS`): `FullyShardedDataParallel.__getattr__` hands it to the
        module it wraps, `self` in the method being that module (krishna1803/nanoGPT's
        `model.configure_optimizers(...)` past the wrap)."""
        if receiver.ref is None or receiver.ref.path or method in distributed.FSDP1_OWN_METHODS:
            return None
        self.flow.consulted.append(receiver.ref.root)
        made = self.flow.origin(receiver, len(self.flow.events))
        if made is None or made.kind != WRAP or not made.args or made.args[0].ref is not None and made.args[0].ref.path:
            return None
        if made.args[0].ref is not None:
            self.flow.consulted.append(made.args[0].ref.root)  # whose maker the caller then reads
        return made

    def method_of_instance(self, func: cst.BaseExpression, receiver: Value) -> FunctionInfo | None:
        """`trainer.save(...)` where `trainer = Trainer(...)`, or `Trainer(...).save()`, and this run
        defines `Trainer.save`; or `Config.wrap(model)`, a static or class method of a class of the file
        called on the class (Coluding/diffusion-egocentric's `FSDPConfig.wrap_unet(unet)`)."""
        if not type(func) is cst.Attribute or receiver.ref is not None and receiver.ref.path:
            return None
        if receiver.ref is None:
            return self.method_built_by(self.construction(receiver, written_call=type(func.value) is cst.Call), func.attr.value)
        if type(func.value) is cst.Name and func.value.value in self.file.classes and not self.is_variable(func.value.value):
            method = self.file.functions.get(f"{func.value.value}.{func.attr.value}")
            return method if method is not None and method.decorated_by("staticmethod", "classmethod") else None
        self.flow.consulted.append(receiver.ref.root)
        return self.method_of_object(receiver, len(self.flow.events), func.attr.value)

    def method_of_object(self, value: Value, before: int, method: str) -> FunctionInfo | None:
        """The method of the class whose call built the object `value` holds before event `before`: the
        one method of every call that may have built it (`Flow.origins`); not known where the arms that
        bound it built objects of different classes, or one of them is no call of a class of the run."""
        found = [self.method_built_by(made, method) for made in self.flow.origins(value, before)]
        return found[0] if found and found[0] is not None and all(other is found[0] for other in found) else None

    def method_built_by(self, built_by: Event | None, method: str) -> FunctionInfo | None:
        """The method of the class whose constructor call (or factory classmethod's) `built_by` is (or of
        the one class of the run by that name that defines it)."""
        found = self.flow.program.class_built_by_event(built_by)
        if found is not None:
            return self.flow.program.method_of_class(*found, method)
        if built_by is None or not built_by.may_construct() or built_by.kind == METHOD:
            return None  # a method of a bare name builds an object of a class only as its factory
        candidates = self.flow.program.methods_named((dotted_name(built_by.node.func) or "").rsplit(".", 1)[-1], method)
        return candidates[0] if len(candidates) == 1 else None

    def call_value(self, node: cst.Call, args: tuple[Value, ...], kwargs: Mapping[str, Value], statement: cst.CSTNode, parents: tuple) -> Value:
        """A call of a value: a function taken from a dispatch table (`MODES[mode]()`), or one a name was bound to."""
        function = self.expr(node.func, statement, parents)
        if not function.callees:
            common = dict(statement=statement, parents=parents, args=args, kwargs=kwargs)
            if function.ref is None:
                return Value(event=self.emit(CALL, node, **common))
            event = self.emit(CALL_VALUE, node, targets=(function.ref,), **common)
            called = self.method_of_object(function, event.index, "__call__") if not function.ref.path else None
            if called is not None:
                # An object of a class of the run that defines `__call__` (akashrayganguly/stable_Zhou's
                # `early_stopping(val_loss, model, path)`, which saves the model): that method runs.
                self.flow.consulted.append(function.ref.root)
                return self.inline(called, node, args, kwargs, function, statement, parents)
            return Value(event=event)
        if self.forwarded is not None and node.args and all(arg.star for arg in node.args):
            args, kwargs = self.forwarded  # `fn(*args, **kwargs)` in a decorator's wrapper: the decorated call's arguments
        return self.call_one_of(function.callees, node, args, kwargs, statement, parents)

    def call_one_of(self, callees: tuple[FunctionInfo, ...], node: cst.Call, args: tuple[Value, ...], kwargs: Mapping[str, Value],
                    statement: cst.CSTNode, parents: tuple) -> Value:
        """Calls one of `callees`: each in an arm of its own, which of them not known."""
        if len(callees) == 1:
            return self.inline(callees[0], node, args, kwargs, Value(), statement, parents)
        self.branches(node, [(lambda callee=callee: self.inline(callee, node, args, kwargs, Value(), statement, parents), False, None) for callee in callees])
        return Value()

    def decorator_wrapper(self, callee: FunctionInfo) -> tuple[FunctionInfo, str] | None:
        """The wrapper a decorator of the run puts around `callee`, and the decorator's parameter that
        holds the function: `def cleanup(fn): def wrapper(*a, **k): try: return fn(*a, **k) finally: ...; return wrapper`."""
        for decorator in callee.node.decorators:
            if type(decorator.decorator) not in (cst.Name, cst.Attribute):
                continue
            function = self.flow.program.resolve_callable(callee.file, None, decorator.decorator)
            if function is None or not function.params:
                continue
            # What the decorator returns: a function it defines, or the function itself: a wrapper when
            # it is the only one it may return for this function (prime-rl's clean_exit returns one
            # wrapper for `async def` functions and another for the others).
            holder = function.params[0]

            def is_coroutine_test(test: cst.CSTNode) -> bool | None:
                """`asyncio.iscoroutinefunction(func)`: whether the decorated function is `async def`."""
                tested = (type(test) is cst.Call and len(test.args) == 1 and type(test.args[0].value) is cst.Name and test.args[0].value.value == holder
                          and (function.file.qualify(test.func) or "") in _COROUTINE_TESTS)
                return callee.node.asynchronous is not None if tested else None

            returned = {name for name in returned_names(function.node.body, is_coroutine_test) if name is not None and name != holder}
            wrappers = [function.file.functions.get(f"{function.qualname}.{name}") for name in returned]
            if len(wrappers) == 1 and wrappers[0] is not None:
                return wrappers[0], holder
        return None

    def inline(self, callee: FunctionInfo, node: cst.Call, args: tuple[Value, ...], kwargs: Mapping[str, Value], receiver: Value, statement: cst.CSTNode, parents: tuple) -> Value:
        if callee.class_name is None and not callee.node.decorators and not arguments_fit(callee.node, node):
            # A call its function's signature refuses raises TypeError: the body never runs from here. (A
            # decorator may take other arguments: `@hydra.main(...) def main(cfg)` is called as `main()`.)
            return Value(event=self.emit(CALL, node, statement=statement, parents=parents, qname=callee.qualname, args=args, kwargs=kwargs))
        callee.callers[id(self.function.node) if self.function else id(self.file)] = self.function
        self.flow.attempted.append((id(callee.node), self.depth))
        if self.depth >= _MAX_INLINE_DEPTH or id(callee.node) in self.stack or callee.name in self.patched or self.raising:
            event = self.emit(CALL, node, statement=statement, parents=parents, qname=callee.qualname, args=args, kwargs=kwargs)
            return Value(event=event)
        self.flow.walked.append(id(callee.node))
        wrapped = self.decorator_wrapper(callee) if self.forwarded is None or self.forwarded_to is not callee else None
        if wrapped is not None:
            # The decorator's wrapper runs, and calls the function where it calls its parameter
            # (inside its `try`, before its `finally`).
            # The caller's call is the call of the function, as rules report it (chain and call sites).
            wrapper, holder = wrapped
            self.emit(ENTER, node, statement=statement, parents=parents, qname=callee.qualname, args=args, kwargs=kwargs)
            walker = Walker(self.flow, wrapper.file, wrapper, {holder: Value(callees=(callee,))}, f"{wrapper.name}@{self.flow.program.next_call_id()}:",
                             self.chain + (callee.name,), self.depth + 1, self.stack, self.outer + parents + (statement,), self.rank_guards,
                             self.call_sites + (node,), self.contexts, self.arms, self.facts)
            walker.forwarded, walker.forwarded_to, walker.patched = (args, kwargs), callee, self.patched
            if callee.class_name and callee.params[:1] == ["self"] and type(node.func) is cst.Attribute:
                walker.forwarded_receiver = receiver, self.receiver_attributes(receiver, "self", type(node.func.value) is cst.Call)
            walker.walk_suite(wrapper.node.body, ())
            walker.finish_returns()
            return walker.returned
        # The wrapper's own call of the function it decorates continues the caller's call.
        through_wrapper = self.forwarded_to is callee
        if not through_wrapper:
            self.emit(ENTER, node, statement=statement, parents=parents, qname=callee.qualname, args=args, kwargs=kwargs)
        call_id = self.flow.program.next_call_id()
        prefix = f"{callee.name}@{call_id}:"
        env: dict[str, Value] = {}
        params = list(callee.params)
        self_name = None
        if callee.class_name and params and params[0] in ("self", "cls"):
            self_name = params.pop(0)
            attributes = None
            if through_wrapper and self.forwarded_receiver is not None:
                receiver, attributes = self.forwarded_receiver  # `func(*args, **kwargs)` in the decorator's wrapper
            elif type(node.func) is cst.Attribute:
                attributes = self.receiver_attributes(receiver, self_name, type(node.func.value) is cst.Call)
            elif callee.name == "__call__" and receiver.ref is not None:
                attributes = self.receiver_attributes(receiver, self_name)  # `obj(...)`: `obj.__call__(...)`
            if attributes is not None:
                env[self_name] = receiver if receiver.ref else Value(ref=Ref(prefix + self_name))
                env.update(attributes)
        for name, value in zip(params, args):
            env[name] = value
        # The parameters given a name the caller imports: a class of the run among them (a class used as
        # a namespace of settings) is one object wherever it is passed (looked up below, where needed).
        given_nodes = list(zip(params, (arg.value for arg in node.args if arg.keyword is None and not arg.star))) + \
            [(arg.keyword.value, arg.value) for arg in node.args if arg.keyword is not None]
        imported_given = {name: given for name, given in given_nodes
                          if type(given) is cst.Name and given.value not in self.env and given.value in self.file.imports}
        spread = self.spread[1] if self.spread is not None and self.spread[0] is node else None
        for name, value in {**(spread or {}), **kwargs}.items():
            if name in params:
                env[name] = value
        # Without `*args`/`**kwargs` the model cannot read at the call, a parameter not given keeps its default.
        defaults_apply = not any(arg.star for arg in node.args) or spread is not None
        falsy = falsy_defaults(callee.node) if defaults_apply else set()
        for name in params:
            if name not in env and defaults_apply and (constant := literal_default(callee.node, name)):
                env[name] = Value(constant=constant)
            if name not in env and defaults_apply and (text := string_default(callee.node, name)) is not None:
                env[name] = Value(text=text)
            default = parameter_default(callee.node, name) if name not in env and defaults_apply else None
            if type(default) is cst.Attribute and (dtype := distributed.TORCH_DTYPES.get(callee.file.qualify(default))):
                env[name] = Value(dtypes=frozenset({dtype}))  # `def wrap(model, dtype=torch.float16)`
            if name in env and env[name].ref is None and (passed := imported_given.get(name)) is not None \
                    and self.names_alike(callee.file, passed.value) and self.one_object(passed):
                # C-W-D/CasCoD's `train_config` (a class, or an object: Coldra1n/CS-Master_Thesis's
                # config from a module the run cannot open), imported, tested and passed on by `main`:
                # the callee's `cfg.enable_fsdp` is the caller's `train_config.enable_fsdp`.
                env[name] = replace(env[name], ref=Ref(passed.value), event=None, element=None, literal=None)
            elif name not in env or env[name].ref is None:
                given = env.get(name, Value())
                # The argument's object under the parameter's name: what it holds and what it is, not
                # the event that made it nor the container it was taken from (the caller's to know).
                env[name] = replace(given, ref=Ref(prefix + name), event=None, element=None, literal=None,
                                    always_false=name in falsy and name not in env)
                self.flow.write(Write.ASSIGNED_ROOT, prefix + name)
                self.record_origin(prefix + name, given.event)
        if self.function is not None and callee.class_name is None and callee.qualname == f"{self.function.qualname}.{callee.name}":
            # A function defined in the caller's body reads the names of the caller it does not bind
            # (a closure: minGPU's `wrap_fsdp` reads `main`'s `rank`), as they are where it is called.
            own = self.flow.program.bound_counts(callee.file, callee)
            env.update({key: value for key, value in self.env.items()
                        if (head := key.split(".", 1)[0]) not in own and head not in callee.params and key not in env})
        chain, call_sites = (self.chain, self.call_sites) if through_wrapper else (self.chain + (callee.name,), self.call_sites + (node,))
        facts = self.facts
        if self_name == "self" and env.get(self_name) is not None and env[self_name].ref is not None and not callee.runs_at_construction():
            facts += self.constructor_facts(callee.file, callee.owner, env[self_name].ref)
        walker = Walker(self.flow, callee.file, callee, env, prefix, chain, self.depth + 1, self.stack,
                         self.outer + parents + (statement,), self.rank_guards, call_sites, self.contexts, self.arms, facts)
        walker.patched = self.patched
        if through_wrapper:
            walker.walk_function()
            walker.finish_returns()
            return walker.returned
        around = Surroundings(chain, call_sites, walker.outer, self.rank_guards, self.contexts, self.arms, self.facts)
        returned = walk_body(walker, self.stack, around, call_id, _MAX_INLINE_DEPTH)
        if self.flow.steps > FLOW_BUDGET:
            raise BudgetExhausted  # a copied walk counts its steps as the walk did
        return returned

    def finish_returns(self) -> None:
        """After a function's body: where a path falls off its end past a `return`, the function may
        return None too (`if x: return True` says nothing of what it returns where `x` fails)."""
        if self.returns and not self.path_ended:
            self.returned = _returned_on_either_path(self.returned, Value(constant="None"))
            self.note_return(Value(constant="None"))
        if self.none_under_rank_test and self.object_returned and self.returned.constant != "None":
            self.returned = replace(self.returned, none_on_some_ranks=True)

    def note_return(self, value: Value) -> None:
        if value.constant == "None":
            self.none_under_rank_test |= len(self.rank_guards) > self.entry_rank_guards
        else:
            # An element of a container may be None itself (RLLaVA's `shards[rank]` of `[None] * world_size`,
            # filled on rank 0 and broadcast): only an object known to be one makes the None rank's own.
            self.object_returned |= value.element is None and not (value.ref and ANY_ELEMENT in value.ref.path) and \
                (value.ref is not None or value.event is not None or value.elements is not None)

    def emit(self, kind: EventKind, node: cst.CSTNode, statement: cst.CSTNode, parents: tuple, **fields) -> Event:
        event = Event(kind, node, self.file, statement, parents, self.chain, function=self.function, outer=self.outer,
                      rank_guards=self.rank_guards, arms=self.arms, call_sites=self.call_sites, contexts=self.contexts,
                      index=len(self.flow.events), facts=self.facts, **fields)
        self.flow.events.append(event)
        return event


_NEGATED = {"True": "False", "False": "True"}


def _returned_past(arms: Arms) -> Arms:
    """Of the arms a walk added, those that mark code past a statement some of whose arms returned."""
    return tuple(arm for arm in arms if type(arm[1]) is frozenset)


def _truth_test(value: Value) -> RankTest | None:
    """How the truth of a value tested (`if state:`, `not state`) depends on the rank: its own test, or,
    for a value None on some ranks only, whether it is None."""
    return value.rank_test or (RankTest(True, True) if value.none_on_some_ranks else None)


def _is_test(node: cst.CSTNode) -> bool:
    """An expression whose value bound to a name is a test its readers read by formula (Walker.formula_of)."""
    return type(node) in (cst.Comparison, cst.BooleanOperation) or type(node) is cst.UnaryOperation and type(node.operator) is cst.Not


def _literal_text(node: cst.CSTNode, file: FileModel) -> str | None:
    """A literal a comparison may test against, as one text whatever its quotes: `'fsdp'`, `-1`, `None`,
    or a member of an imported class by its qualified name (`ShardingStrategy.NO_SHARD`)."""
    if type(node) is cst.Attribute and type(node.value) in (cst.Name, cst.Attribute):
        return file.qualify(node)
    if type(node) is cst.SimpleString:
        text = string_value(node)
        return repr(text) if isinstance(text, str) else None
    if type(node) is cst.Name and node.value in CONSTANTS:
        return node.value
    return integer_literal(node)


def _pinned_scope(node: cst.Comparison, values: list[Value]) -> RankScope | None:
    """`local_rank == 0`, `os.environ["LOCAL_RANK"] == "0"`: where it holds, one rank of that scope passes."""
    if len(node.comparisons) != 1 or type(node.comparisons[0].operator) is not cst.Equal:
        return None
    sides = ((node.left, values[0]), (node.comparisons[0].comparator, values[1]))
    for (_, rank_side), (constant, _) in (sides, sides[::-1]):
        if rank_side.rank is not None and not rank_side.rank.formatted and type(constant) in (cst.Integer, cst.SimpleString):
            return rank_side.rank.scope
    return None


def _rank_of_either(values: Sequence[Value]) -> Rank | None:
    """The rank a value that is one of `values` (each on a path of its own) is, where one is.
    The rank on one path and a literal on the other (`rank = 0` where there is no process group,
    `int(os.environ["RANK"]) if dist.is_initialized() else 0`): where the value differs between ranks,
    it is the rank. A rank on every path, read in different ways (`dist.get_rank()`, else `RANK`), of
    the same scope or of another on some (DNALongBench's `local_rank = init_distributed()`, else
    `local_rank = args.local_rank`): a rank, whose scope is that one, or depends on the path, as for a
    function's returns (`_returned_on_either_path`)."""
    ranks = {value.rank for value in values}
    if len(ranks) == 2 and None in ranks and all(value.rank or value.literal or value.constant for value in values):
        ranks.discard(None)
    if len(ranks) > 1 and None not in ranks and len({rank.formatted for rank in ranks}) == 1:
        scopes = {rank.scope for rank in ranks}
        ranks = {Rank(scopes.pop() if len(scopes) == 1 else SOME_RANK, formatted=next(iter(ranks)).formatted)}
    return ranks.pop() if len(ranks) == 1 else None


def _returned_on_either_path(earlier: Value, later: Value) -> Value:
    """What a function returns, from two of its `return`s: the later one, unless it says nothing and
    the earlier one says what the rank is (`if is_distributed(): return dist.get_rank(group)` then
    `return 0`: outside a process group there is one rank, and no rank test to make), or it is None
    and the earlier one a module."""
    says_nothing = later.ref is None and later.event is None and later.rank is None and later.rank_test is None
    if says_nothing and (earlier.rank is not None or earlier.rank_test is not None):
        return earlier
    # `return getattr(m, "embed_tokens")` then `return None`
    chosen, other = (earlier, later) if later.constant == "None" and earlier.ref is not None else (later, earlier)
    both = _same_on_both(chosen, other)
    if both.rank is not None and other.rank is not None and other.rank.scope is not both.rank.scope:
        # `return int(os.environ["LOCAL_RANK"])` ... `return dist.get_rank()` (MobileLLM's `get_local_rank`):
        # a rank, but which one depends on the path
        both = replace(both, rank=replace(both.rank, scope=SOME_RANK, variable=None))
    # One return under a test of what the object is (`if isinstance(m, FSDP): return True` ... `return False`): so is the result.
    return replace(both, type_test=True) if other.type_test and not both.type_test else both


def _same_on_both(chosen: Value, other: Value) -> Value:
    """`chosen`, without the literals that hold on its path only (`return 0, 1` after `return rank, size`),
    nor the modules whose parameters or state it holds on its path only, where the other path returns
    an object too (WeatherGenerator's `if fsdp: return gathered` ... `else: return sd`: only the `else`
    arm's holds the sharded module's state); a `None` the other path returns holds nothing to weigh."""
    elements = chosen.elements
    if elements is not None:
        others = other.elements if other.elements is not None and len(other.elements) == len(elements) else (Value(),) * len(elements)
        elements = tuple(_same_on_both(element, other_element) for element, other_element in zip(elements, others))
    returns_object = other.constant != "None" and (other.event is not None or other.ref is not None or other.elements is not None)
    params_of = chosen.params_of & other.params_of if returns_object and chosen.params_of != other.params_of else chosen.params_of
    if chosen.constant == other.constant and params_of is chosen.params_of and (elements is None or all(map(operator.is_, elements, chosen.elements))):
        return chosen
    return dataclasses.replace(chosen, constant=chosen.constant if chosen.constant == other.constant else None, elements=elements,
                               params_of=params_of or NO_REFS)


def _formatted_rank(parts: Iterable[Value]) -> Rank | None:
    """The rank a string built of `parts` (or of a tuple among them) is formatted from, where one
    rank of one scope is among them."""
    ranks = {replace(value.rank, formatted=True) for part in parts for value in (part, *(part.elements or ())) if value.rank}
    return ranks.pop() if len(ranks) == 1 else None


def _not_none(first: Value, second: Value) -> Value | None:
    """Of two values one of which is the constant None, the other: a module or None is that module
    wherever it is used as one. None when neither is."""
    return first if second.constant == "None" else second if first.constant == "None" else None


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


def _string_key(target: cst.Subscript) -> str | None:
    """`"lr"` of `config["lr"]`: the one key a subscript names by a string literal, else None."""
    [element] = target.slice if len(target.slice) == 1 else (None,)
    index = element.slice if element is not None else None
    if type(index) is cst.Index and type(index.value) is cst.SimpleString and isinstance(key := string_value(index.value), str):
        return key
    return None


def _entries_given(node: cst.Call, args: tuple[Value, ...], kwargs: Mapping[str, Value]) -> tuple | None:
    """What `d.update(...)` puts in `d`, as entries: a dict the model knows the entries of, then the
    keywords; None where any of it is unknown (`d.update(other)`, `d.update(**extra)`)."""
    if any(arg.star for arg in node.args) or len(args) > 1 or args and args[0].entries is None:
        return None
    keywords = tuple((arg.keyword.value, kwargs[arg.keyword.value], arg.value) for arg in node.args if arg.keyword is not None)
    return (args[0].entries if args else ()) + keywords


_OBJECT = Ref("\x00object")  # the object a class's constructor facts are of, before a caller names it
_ORDER_SYMBOLS = {cst.LessThan: "<", cst.LessThanEqual: "<=", cst.GreaterThan: ">", cst.GreaterThanEqual: ">="}
_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}  # `0 < stage` is `stage > 0`
_ORDERINGS = {kind: conditions.ORDERS[symbol] for kind, symbol in _ORDER_SYMBOLS.items()} | {cst.Equal: operator.eq, cst.NotEqual: operator.ne}


def _compared(test: cst.Comparison, file: FileModel, subject_of: Callable[[cst.CSTNode], object], either_side: bool) -> tuple | None:
    """A comparison with a literal as a formula's atom (see conditions): `args.dist == "fsdp"`,
    `stage >= 2`, the other side as `subject_of` names it; with `either_side`, the literal on the left
    too (`0 < stage`). None where no side is a literal, or `subject_of` names no subject (None)."""
    operator, left, other = type(test.comparisons[0].operator), test.left, test.comparisons[0].comparator
    sides = ((left, other, False), (other, left, True)) if either_side else ((left, other, False),)
    for subject, literal, flipped in sides:
        text, number = _literal_text(literal, file), _integer(integer_literal(literal))
        if operator in (cst.Equal, cst.NotEqual) and text is not None and (named := subject_of(subject)) is not None:
            return ("eq", named, text) if operator is cst.Equal else ("not", ("eq", named, text))
        if operator in _ORDER_SYMBOLS and number is not None and (named := subject_of(subject)) is not None:
            symbol = _ORDER_SYMBOLS[operator]
            return ("cmp", named, (_FLIPPED[symbol] if flipped else symbol, number))
    return None


def _all_of(*formulas: tuple) -> tuple:
    """The formula that holds where all of `formulas` do."""
    combined = formulas[-1]
    for formula in reversed(formulas[:-1]):
        combined = ("and", formula, combined)
    return combined


def _refs_in(formula) -> Iterator[Ref]:
    if type(formula) is Ref:
        yield formula
    elif type(formula) is tuple and formula[0] in ("not", "and", "or"):
        for part in formula[1:]:
            yield from _refs_in(part)
    elif type(formula) is tuple and type(formula[1]) is Ref:
        yield formula[1]


def _number(literal: str | None) -> float | None:
    """The value of a number literal (`1`, `0x10`, `-1.0`, `1e-4`); None for anything else."""
    whole = _integer(literal)
    if whole is not None or literal is None:
        return whole
    try:
        return float(literal)
    except ValueError:
        return None


def _integer(literal: str | None) -> int | None:
    """The value of an integer literal (`1`, `0x10`, `1_000`); None for anything else."""
    try:
        return int(literal, 0) if literal is not None else None
    except ValueError:
        return None


def _dtypes_taken(table: Value, key: str | None) -> frozenset[str] | None:
    """The dtypes an entry of a dict written out may be (`{"fp16": torch.float16, ...}[name]`): the one
    of `key` when the key is known, else those of every entry, when each entry is a dtype."""
    if not table.entries or not all(entry.dtypes for _, entry, _ in table.entries):
        return None
    chosen = [entry.dtypes for name, entry, _ in table.entries if name == key] if key is not None else []
    return chosen[-1] if chosen else frozenset().union(*(entry.dtypes for _, entry, _ in table.entries))


def _same_text(left: Value, right: Value) -> bool | None:
    """Whether two strings known whole are the same; None where either is not known whole."""
    if left.text is None or right.text is None or UNKNOWN_PART in left.text + right.text:
        return None
    return left.text == right.text


def _never_equal(left: Value, right: Value) -> bool:
    """`==` is false whatever runs: a torch dtype against a string, or against dtypes it is none of."""
    for one, other in ((left, right), (right, left)):
        if one.dtypes and (other.text is not None or other.dtypes and one.dtypes.isdisjoint(other.dtypes)):
            return True
    return False


def _either(refs: list[Ref | None]) -> Ref | None:
    """A value that is one of `refs`: that ref when they are one, or any module one step below their
    common part when each is one step below it (`model.backbone` or `model.model`: `model.[]`);
    else not known."""
    common = _common_ref(refs)
    if common is None or all(ref == common for ref in refs):
        return common
    return common.child(ANY_ELEMENT) if all(len(ref.path) == len(common.path) + 1 for ref in refs) else None


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
