"""A flow: the ordered events of one function (or module body), and the questions rules ask of them."""

from __future__ import annotations

import enum
import heapq
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

import libcst as cst

from fsdplint import distributed
from fsdplint.model.conditions import GROUP_STARTED, can_hold
from fsdplint.model.constructors import Holds, holdings_at, stored_attributes
from fsdplint.model.events import (
    ASSIGN,
    CALL,
    CALL_VALUE,
    METHOD,
    SHARD,
    WRAP,
    Event,
    EventKind,
    RankGuard,
)
from fsdplint.model.modules import RETURNS_MODULE_GIVEN, RETURNS_SELF
from fsdplint.model.names import BUILTINS
from fsdplint.model.strategies import chooses_full_state_dict, shards_nothing
from fsdplint.model.syntax import holds_statement, isinstance_classes, parts_that_hold, runs_forever, string_value
from fsdplint.model.values import RankScope, Ref, Value

if TYPE_CHECKING:
    from fsdplint.model.events import RankGuard
    from fsdplint.model.files import FileModel, FunctionInfo
    from fsdplint.model.program import Program


@dataclass(slots=True)
class Loop:
    """A `for` or `while` loop the walker walked once (a `for` over known values is unrolled instead,
    and has none): what it iterates, and its body's events, `flow.events[first:end]`, those of nested
    loops and inlined calls included."""

    node: cst.For | cst.While
    iterable: Value | None  # None for a `while`
    file: FileModel
    function: FunctionInfo | None
    chain: tuple[str, ...]  # as Event.chain
    first: int
    end: int
    rank_guards: tuple[RankGuard, ...] = ()  # the guards around the loop, as Event.rank_guards
    call_sites: tuple[cst.Call, ...] = ()
    around: tuple[cst.CSTNode, ...] = ()  # the statements around it, across inlined calls (Event.outer + Event.parents)
    contexts: tuple[Event, ...] = ()  # the `with` items around it, as Event.contexts

    def computes_gradients(self) -> bool:
        """Not under `with torch.no_grad():` or `torch.inference_mode()`: an evaluation loop is."""
        return not any(context.qname in distributed.GRADIENT_FREE_CONTEXTS for context in self.contexts)

    def body(self, flow: Flow) -> list[Event]:
        return flow.events[self.first:self.end]

    def holds(self, event: Event) -> bool:
        return self.first <= event.index < self.end

    def within(self, other: Loop) -> bool:
        """The loop runs in the body of `other` (in this pass of it: a body with no events, which
        indexes cannot place, is placed by the statements around it)."""
        return self is not other and other.first <= self.first and self.end <= other.end and any(node is other.node for node in self.around)


class Managed(enum.Enum):
    """How a module stands to the modules a shard event gives to FSDP (`Flow.sharding_of`)."""

    WITHIN = enum.auto()  # it is one of them or lives in one: its parameters are sharded
    UNIT = enum.auto()  # it is one of them, or may be: calling it runs FSDP's hooks
    HOLDS_UNIT = enum.auto()  # it is one of them or holds one: copying it copies an FSDP module


class Write(enum.Enum):
    """A walk's write to its flow's tables, kept in `Flow.writes` so that a summary can replay it (see summaries)."""

    ASSIGNED_ROOT = enum.auto()  # assigned_roots.add(root)
    INSTANCE = enum.auto()  # instances[root] = class
    BINDING = enum.auto()  # event.binding = ref; bindings[ref].append(event)
    TARGETS = enum.auto()  # event.targets = refs
    OPTIMIZER_BINDING = enum.auto()  # optimizer_bindings.add(ref)
    CONSTRUCTED = enum.auto()  # constructed[root] += the call that built the object bound to it
    DERIVED = enum.auto()  # derived_from[root] = roots
    DERIVED_MORE = enum.auto()  # derived_from[root] |= roots
    READS_RANK = enum.auto()  # reads_rank = True
    ASSERTED_RANK = enum.auto()  # asserted_ranks.add(scope)
    TYPE_TESTED = enum.auto()  # type_tested.add(id of an `if` whose test is a Value.type_test)
    JOINED = enum.auto()  # joined[root] = the refs it is one of
    COPIED = enum.auto()  # copies[root] = the ref of the object it is a copy of
    PER_PASS = enum.auto()  # per_pass.add(root)


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
        # root -> the calls that built the objects bound to it (`torch.nn.Linear(...)`), in order (Flow.constructor)
        self.constructed: dict[str, list[Event]] = {}
        # root -> the class a call built it by (Value.built_by): `TinyLM` for `model = TinyLM(args).to(device)`
        self.instances: dict[str, str] = {}
        # root -> roots of the values it was computed from (`module = get_module(model, path)`)
        self.derived_from: dict[str, set[str]] = {}
        # root -> the objects each path gave a name where paths meet (`if resume: model = load(...) else:
        # model = FSDP(...)`): the name's new value there is one of them
        self.joined: dict[str, tuple[Ref, ...]] = {}
        # root -> the object it holds a copy of (`copy.deepcopy(train_dataloader)` handed to `train(loader)`)
        self.copies: dict[str, Ref] = {}
        self._by_kind: dict[str, list[Event]] = {}  # the events, by kind, up to _indexed
        self._indexed = 0
        self.steps = 0  # expressions evaluated, against FLOW_BUDGET
        self.versions = 0  # bindings that made a new value of a name (`model#3`)
        self.exhausted = False  # the budget ran out: the flow holds no events
        self.skipped = False  # the program's budget ran out before it (and it is `exhausted` too)
        self.loops: list[Loop] = []  # the loops walked once, each after the loops nested in it
        self.reads_rank = False  # the walk evaluated this process's rank (`dist.get_rank()`, `self.rank`, `RANK`)
        # `assert local_rank == 0`: the run goes on only where the rank of this scope is that one (one process per node)
        self.asserted_ranks: set[RankScope] = set()
        # The `if`s (node ids) whose test is whether a module or tensor is sharded (Value.type_test): code
        # under them adapts to what it is given (physicsnemo's checkpoint helpers barrier only for FSDP models).
        self.type_tested: set[int] = set()
        self.writes: list[tuple[Write, object, object]] = []  # every write to the tables above, in order
        self.attempted: list[tuple[int, int]] = []  # the functions (node ids) the walk came to call, followed or not, and from which depth
        self.consulted: list[str] = []  # the variables whose maker a walk looked up (what built them: `origin`, `constructed`)
        # The variables whose sharding a walk asked (`isinstance(model, FSDPModule)`): a walk is copied
        # into another call only where they are alike (summaries.sharding_state).
        self.asked_sharding: list[str] = []
        # Variables each pass of a loop binds to another element the model does not know (LightX2V's
        # `for module, reshard in _iter_shard_plan(plan)`): no one object.
        self.per_pass: set[str] = set()
        self.decided_by_facts = 0  # the rank tests walks found decided by the tests around them (Walker.statement)
        self.walked: list[int] = []  # the functions (node ids) whose bodies the walk followed where it calls them

    def done_walking(self) -> None:
        """Drops what only walks read (summaries keep their own part of it)."""
        self.writes, self.attempted, self.consulted, self.walked, self.asked_sharding = [], [], [], [], []

    def alternatives(self, ref: Ref) -> tuple[Ref, ...]:
        """The objects `ref` may be: where paths that bound its variable to different objects met, each
        of them (bionemo's `transformer_layers`, `model.model.encoder.layers` in one arm and
        `model.esm.encoder.layer` in the other), with the rest of its path; else itself."""
        joined = self.joined.get(ref.root)
        return tuple(Ref(one.root, one.path + ref.path) for one in joined) if joined else (ref,)

    def constructor(self, root: str, before: int | None = None) -> str | None:
        """The qualified name of the call that built the object `root` holds before event `before`
        (anywhere, without it): a name bound again later to a `DDP(...)` (physicsnemo's ViT example,
        in another arm after its `fully_shard`) was not built by it where it is sharded."""
        made = [event for event in self.constructed.get(root, ()) if before is None or event.index < before]
        return made[-1].qname if made else None

    def write(self, kind: Write, key, value=None) -> None:
        """Writes to the tables above, and keeps the write for summaries to replay."""
        if kind is Write.ASSIGNED_ROOT:
            self.assigned_roots.add(key)
        elif kind is Write.INSTANCE:
            self.instances[key] = value
        elif kind is Write.BINDING:
            key.binding = value
            self.bindings.setdefault(value, []).append(key)
        elif kind is Write.TARGETS:
            key.targets = value
        elif kind is Write.OPTIMIZER_BINDING:
            self.optimizer_bindings.add(key)
        elif kind is Write.CONSTRUCTED:
            self.constructed.setdefault(key, []).append(value)
        elif kind is Write.DERIVED:
            self.derived_from[key] = value
        elif kind is Write.DERIVED_MORE:
            self.derived_from.setdefault(key, set()).update(value)
        elif kind is Write.READS_RANK:
            self.reads_rank = True
        elif kind is Write.ASSERTED_RANK:
            self.asserted_ranks.add(key)
        elif kind is Write.TYPE_TESTED:
            self.type_tested.add(key)
        elif kind is Write.JOINED:
            self.joined[key] = value
        elif kind is Write.COPIED:
            self.copies[key] = value
        elif kind is Write.PER_PASS:
            self.per_pass.add(key)
        self.writes.append((kind, key, value))

    @property
    def is_entry(self) -> bool:
        """No flow of this run calls it: nothing outside it can have shaped its values."""
        return self.function is None or not self.function.called

    def computed_from(self, root: str) -> set[str]:
        """Every root the value of `root` was computed from, through the values it was computed from
        (`loss` from `out`, `out` from `model` in `out = model(x); loss = criterion(out, y)`)."""
        found: set[str] = set()
        pending = [root]
        while pending:
            for source in self.derived_from.get(pending.pop(), ()):
                if source not in found:
                    found.add(source)
                    pending.append(source)
        return found

    def has_local_provenance(self, ref: Ref) -> bool:
        """The value was made inside this flow (not a parameter, global or attribute of self, nor an
        element a loop took from something the model does not know)."""
        return ref.root in self.assigned_roots and ref.root not in self.parameter_roots and ref.root not in self.per_pass

    def of_kind(self, *kinds: EventKind) -> Iterator[Event]:
        """The events of these kinds, in order: rules ask this of every flow, most for a rare kind."""
        for event in self.events[self._indexed:]:  # emitted since the last call
            self._by_kind.setdefault(event.kind, []).append(event)
        self._indexed = len(self.events)
        lists = [self._by_kind.get(kind, []) for kind in kinds]
        return iter(lists[0]) if len(lists) == 1 else heapq.merge(*lists, key=lambda event: event.index)

    def shard_events(self, fsdp: int | None = None) -> Iterator[Event]:
        kinds = {2: (SHARD,), 1: (WRAP,), None: (SHARD, WRAP)}[fsdp]
        return self.of_kind(*kinds)

    def sharding_of(self, ref: Ref, before: int, fsdp: int | None = 2, how: Managed = Managed.WITHIN) -> Event | None:
        """The last shard event that manages `ref` before event `before`: one whose module `ref` is or
        lives in; with `how`, one whose module `ref` is or may be (UNIT), or is or holds (HOLDS_UNIT).

        With `fsdp=1` or `2`, only when every event that manages it is of that FSDP: a module that both
        `fully_shard` and `FullyShardedDataParallel` reach (`if use_fsdp2: fully_shard(model) else:
        model = FSDP(model)`) is of neither, since which one runs is not known. Falls back to what
        other methods of the same class shard on `self`, except in `__init__` and the methods only it
        calls, which run before any of them, and where this flow shards the module itself later (it says when).
        """
        def manages(event: Event, ref: Ref = ref) -> bool:
            if how is Managed.WITHIN:
                return any(ref.is_within(target) for target in event.targets)
            return any(ref.is_one_of(target) or ref.may_be(target) or how is Managed.HOLDS_UNIT and target.is_within(ref) for target in event.targets)

        at = self.events[before] if before < len(self.events) else None
        managing = [event for event in itertools.takewhile(lambda event: event.index < before, self.of_kind(SHARD, WRAP))
                    if manages(event) and not (at and event.excludes(at))]
        if not managing and ref.root == "self" and self.function and not self.function.runs_at_construction() \
                and not any(manages(event) for event in self.of_kind(SHARD, WRAP)):
            # Not one whose tests exclude this event's (R3-v2's `_wrap_fsdp` under `if backend == "fsdp":`,
            # and the clip past `if backend == "fsdp": ...; return` in another method)
            managing = [event for event in self.program.class_shards.get((self.file.module_name, self.function.class_name), ())
                        if manages(event) and not (at and event.excludes(at))]
        if not managing and ref.path and ref.root != "self" and self.program.class_shards:
            managing = self._left_by_constructor(ref, before, manages)
        if not managing and ref.root in self.joined:
            # One of the objects the paths gave it: managed where every one of them is (a must, not a may).
            found = [self.sharding_of(one, before, fsdp, how) for one in self.alternatives(ref)]
            return max(found, key=lambda event: event.index) if all(found) else None
        if fsdp is not None and {event.kind for event in managing} != {SHARD if fsdp == 2 else WRAP}:
            return None
        return managing[-1] if managing else None

    def _left_by_constructor(self, ref: Ref, before: int, manages) -> list[Event]:
        """The shard events that left `ref` (`trainer.model`) sharded when the constructor of its object
        returned, for an object of a class of the run this flow built (`class_of_object`): those of
        `Program.class_shards` that run whenever the constructor does (in `__init__` or the methods only
        it calls, in no arm and under no rank guard: a must, as a variable joined from arms is), on
        `self` at the attribute's path; none where this flow assigned that attribute before `before`."""
        found = self.class_of_object(ref.root, before)
        if found is None:
            return []
        if any(event.index < before and any(target.root == ref.root and target.path[:1] == ref.path[:1] for target in event.targets)
               for event in self.of_kind(ASSIGN)):
            return []
        own = Ref("self", ref.path)
        return [event for event in self.program.class_shards.get((found[0].module_name, found[1].rsplit(".", 1)[-1]), ())
                if event.function is not None and event.function.runs_at_construction() and event.unconditional and manages(event, own)]

    def sharded_state(self, value: Value, before: int) -> list[tuple[Ref, Event]]:
        """The modules whose FSDP2-sharded state `value` holds at event `before`, each with its last
        shard event: sharded before `before` and, where the value says where their state was taken
        (`Value.params_read`), at one of those places: a `state_dict()` taken in an arm where the
        module is not sharded holds plain tensors (deepmd-kit's `module.state_dict()` under `if not
        shards_parameters`, saved past the `if` beside the gathered arm's full state dict)."""
        taken = [read for read in value.params_read if read.index < len(self.events) and self.events[read.index] is read]
        if len(taken) != len(value.params_read):
            taken = []  # taken in another flow: not known here
        found = []
        for module in sorted(value.params_of, key=str):
            shard = self.sharding_of(module, before, fsdp=2)
            if shard is not None and (not taken or any(self.sharding_of(module, read.index, fsdp=2) is not None for read in taken)):
                found.append((module, shard))
        return found

    def group_started_past(self, guard: RankGuard, event: Event) -> bool:
        """The process group `event`'s collective runs on was started past `guard`, on the path to
        `event`: its members are the ranks the guard keeps, so the ranks it keeps out are no members, and
        a collective of the group is not one they fail to join. The default group started there
        (compose-rl's launcher: `if local_rank != 0: return`, then `init_process_group(world_size=
        num_nodes, rank=node_rank)`), or, for a forward, the device mesh its module was sharded on,
        built there (garrett361/mamba's test: under `if rank < world_size // 2:`, `init_device_mesh(
        "cuda", (world_size // 2,))` and a new model sharded on it)."""
        def started_here(start: Event | None) -> bool:
            return start is not None and start.index < event.index and not start.excludes(event) and any(
                mine is guard or mine.node is guard.node and mine.branch is guard.branch for mine in start.rank_guards)

        if any(start.qname == distributed.INIT_PROCESS_GROUP and started_here(start)
               for start in itertools.takewhile(lambda start: start.index < event.index, self.of_kind(CALL))):
            return True
        shard = self.sharding_of(event.target, event.index, fsdp=2, how=Managed.UNIT) if event.kind == CALL_VALUE and event.target else None
        mesh = shard.argument(None, "mesh") if shard is not None else None
        made = self.origin(mesh[1], shard.index) if mesh is not None else None
        return made is not None and made.kind == CALL and made.qname in distributed.INIT_DEVICE_MESH and started_here(made)

    def runs_forever_after(self, event: Event) -> bool:
        """On every path past `event`, the process enters a loop nothing leaves (`while True:` serving
        requests, LLaMA2-Accessory's model workers; a helper's `while True: time.sleep(...)`, NVlabs/rcm's
        `barrier()`): it never reaches its end, and is stopped, not torn down. The loop is in no arm
        apart from the event, and every statement that leads from their common block to it runs
        whenever reached (a call's statement, a `with`, a `try`'s body), and no `try` around it
        handles an error the loop raises."""
        path = (*event.outer, *event.parents, event.statement)
        for loop in self.loops:
            if loop.first <= event.index or loop.end == loop.first or not runs_forever(loop.node) \
                    or event.exclusive(self.events[loop.first]):
                continue
            own = (*loop.around, loop.node)
            shared = next((depth for depth, (mine, theirs) in enumerate(zip(path, own)) if mine is not theirs), min(len(path), len(own)))
            if all(_always_enters(outer, inner) for outer, inner in zip(own[shared:], own[shared + 1:])) \
                    and not any(_handles_errors_of(outer, inner) for outer, inner in zip(own, own[1:])):
                return True
        return False

    def forward_methods_registered(self) -> set[tuple[Ref, str]]:
        """The methods this flow makes run FSDP2's hooks, each with its module:
        `register_fsdp_forward_method(module, "generate")`."""
        return {(event.args[0].ref, name) for event in self.of_kind(CALL)
                if (event.qname or "").endswith("register_fsdp_forward_method") and len(event.node.args) >= 2 and event.args
                and event.args[0].ref is not None and type(event.node.args[1].value) is cst.SimpleString
                and isinstance(name := string_value(event.node.args[1].value), str)}

    def runs_hooks(self, ref: Ref, method: str) -> bool:
        """`ref.method(...)` runs FSDP2's hooks: the method is registered for the module in this flow, or,
        for `self.x` in a method, in any method of its class (olmoearth's `apply_fsdp` shards
        `self.patch_embeddings` and registers its `forward`, which `forward` calls), as a class's shards
        on `self` are known to its methods."""
        if (ref, method) in self.forward_methods_registered():
            return True
        return ref.root == "self" and self.function is not None and self.function.class_name is not None \
            and (ref, method) in self.program.class_registrations.get((self.file.module_name, self.function.class_name), ())

    def isinstance_known(self, event: Event, ref: Ref, classes: tuple[str, ...], attributes: tuple[str, ...] = ()) -> bool | None:
        """Whether `ref` (or a module holding it) is an instance of one of `classes` (qualified names)
        where `event` runs, as the `if isinstance(...)` tests around it say, or, with `attributes`, as
        the duck-typed `if hasattr(x, "full_tensor"):` says: True, False, or None."""
        # A test's node is evaluated once per inlined call of its function, each on that call's own
        # variables: every evaluation is a candidate.
        tests: dict[int, list[Event]] = {}
        for candidate in self.of_kind(CALL):
            if candidate.qname in ("isinstance", "hasattr") and len(candidate.args) == 2 and candidate.args[0].ref is not None:
                tests.setdefault(id(candidate.node), []).append(candidate)
        for test, holds in (fact for node, in_body in event.branches() for fact in parts_that_hold(node.test, in_body)):
            check = next((check for check in tests.get(id(test), ()) if ref.is_within(check.args[0].ref)), None)
            if check is None:
                continue
            second = check.node.args[1].value
            if check.qname == "hasattr":
                if type(second) is cst.SimpleString and string_value(second) in attributes:
                    return holds
                continue
            if any(self.file.qualify(name) in classes or check.file.qualify(name) in classes for name in isinstance_classes(check.node)):
                return holds
        return None

    def escapes(self, ref: Ref, start: int = 0, end: int | None = None) -> bool:
        """`ref` was handed to a function this run cannot see, between events `start` and `end`
        (builtins such as `print` or `isinstance` do not count)."""
        for event in self.events[start:end]:
            if event.kind == CALL and not distributed.is_torch_name(event.qname or "") and event.qname not in BUILTINS:
                if any(arg.root == ref.root for arg in event.arg_refs()):
                    return True
        return False

    def handed_on(self, ref: Ref, start: int = 0, end: int | None = None) -> bool:
        """`ref` was handed to code this run cannot see (`escapes`), or to a value called (`build(model)`
        where `build` is a name the model knows nothing of), between events `start` and `end`."""
        return self.escapes(ref, start, end) or any(
            event.kind == CALL_VALUE and any(arg.root == ref.root for arg in event.arg_refs()) for event in self.events[start:end])

    def origin(self, value: Value, before: int) -> Event | None:
        """The event that made `value`: its own, or the last one assigned to its variable before event
        `before` (`options = StateDictOptions(...)`, `state = torch.load(path)`)."""
        if value.event is not None:
            return value.event
        return max(self._bindings_before(value, before), key=lambda event: event.index, default=None)

    def origins(self, value: Value, before: int) -> list[Event]:
        """Every event that may have made `value` before event `before`: its own, or each binding of its
        variable that no later binding on every path to it replaces: one per arm where exclusive arms
        each bind it (`if init_from == "scratch": model = GPT(conf) ... else: model = Llama(conf)`),
        where `origin` gives the last one."""
        if value.event is not None:
            return [value.event]
        made = self._bindings_before(value, before)
        return [event for event in made if not any(later.index > event.index and later.on_every_path_to(event) for later in made)]

    def class_of_object(self, root: str, before: int, through_packages: bool = False) -> tuple[FileModel, str] | None:
        """The class of the run of the object the variable `root` holds before event `before`: its
        class for `self` of the flow's own method, else the one class every call that may have built
        it constructs (`constructions`); None where that is not known. With `through_packages`, a
        class a package re-exports too (`Program.class_of`)."""
        function = self.function
        if function is not None and function.class_name is not None and function.params[:1] == [root] \
                and not function.decorated_by("staticmethod", "classmethod"):
            return function.file, function.owner
        classes = [self.program.class_built_by_event(made, through_packages) for made in self.constructions(root, before)]
        return classes[0] if classes and classes[0] is not None and all(found == classes[0] for found in classes) else None

    def constructions(self, root: str, before: int) -> list[Event]:
        """The calls that may have built the object the variable `root` holds before event `before`
        (`origins`), seen through the calls that give back the module they are given: `model.cuda()`,
        `nn.SyncBatchNorm.convert_sync_batchnorm(model)` (Dinov2_modified's student)."""
        found: list[Event] = []
        for made in self.origins(Value(ref=Ref(root)), before):
            given = made.target if made.kind == METHOD and made.method in RETURNS_SELF else \
                made.args[0].ref if made.kind == CALL and made.qname in RETURNS_MODULE_GIVEN and made.args else None
            found += self.constructions(given.root, made.index) if given is not None and not given.path else [made]
        return found

    def attribute_holdings(self, root: str, before: int, through_packages: bool = False) -> dict[str, Holds]:
        """Whether the attributes of the object `root` holds before event `before`, kept from its
        construction, may hold parameters (`constructors.holdings_at`), where every construction of it
        (`constructions`, a call of a class of the run) agrees: `num_masks=6` holds none. With
        `through_packages`, a class a package re-exports too (`Program.class_of`)."""
        found: dict[str, Holds] | None = None
        for made in self.constructions(root, before):
            built = self.program.class_built_by_event(made, through_packages)
            known = holdings_at(self.program, *built, made.node, made.args, made.kwargs) if built is not None else {}
            found = known if found is None else {attribute: holds if holds == known[attribute] else Holds.UNKNOWN
                                                 for attribute, holds in found.items() if attribute in known}
        return found or {}

    def made_by_constructor(self, ref: Ref, before: int) -> tuple[Flow, Event] | None:
        """Where the object an attribute of an object holds (`trainer.scaler`, `self.scaler` in a
        method) was built by its class's constructor: the constructor's flow and the call there
        (`self.scaler = GradScaler()`), where the constructor's top-level statement is the only
        assignment of that attribute in the class and its bases (constructors.stored_attributes) and
        the object's class is known (`class_of_object`). None where not known."""
        if len(ref.path) != 1:
            return None
        found = self.class_of_object(ref.root, before)
        if found is None:
            return None
        held = stored_attributes(self.program, *found, objects=True)[1].get(ref.path[0])
        flow = self.program.constructor_flow(*found) if held is not None and held.built_by is not None else None
        if flow is None:
            return None
        made = flow.bindings.get(Ref(flow.function.params[0], ref.path), ())
        return (flow, made[0]) if len(made) == 1 and made[0].index >= 0 else None

    def _bindings_before(self, value: Value, before: int) -> list[Event]:
        """The events assigned to `value`'s variable before event `before`, in no arm apart from it."""
        if value.ref is None:
            return []
        # By the index of bindings: scanning the events back cost 90 % of a run on accelerate.
        at = self.events[before] if before < len(self.events) else None
        return [event for event in self.bindings.get(Ref(value.ref.root), ()) if 0 <= event.index < before and not (at and event.exclusive(at))]

    def full_state_dict(self, event: Event) -> bool | None:
        """Whether a state-dict helper call asks for the full state dict (`options=StateDictOptions(
        full_state_dict=True)`): False without `options=` (the helpers' default is the sharded state),
        None where the options are not known (a `**` argument, a variable made elsewhere or more than once)."""
        if any(arg.star for arg in event.node.args):
            return None
        options = event.kwargs.get("options")
        if options is None or options.constant == "None":
            return False
        if options.event is not None:
            made = [options.event]  # `options=StateDictOptions(...)` written in the call
        elif options.ref is not None and not options.ref.path:
            made = [binding for binding in self.bindings.get(Ref(options.ref.root), ()) if binding.index < event.index]
        else:
            made = []
        if len(made) != 1 or made[0].kind != CALL or not (made[0].qname or "").endswith("StateDictOptions") or any(arg.star for arg in made[0].node.args):
            return None
        given = next((arg.value for arg in made[0].node.args if arg.keyword is not None and arg.keyword.value == "full_state_dict"), None)
        if given is None:
            return False
        return {"True": True, "False": False}.get(given.value) if type(given) is cst.Name else None

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
        dict (of a module that may be sharded where they run), `DTensor.full_tensor()`, FSDP1's
        `summon_full_params`/`full_optim_state_dict` and the wrapped module's `state_dict()` under
        FULL_STATE_DICT (its default), `unshard()` and a forward of a sharded module.
        Not one where it runs under an `if` on whether a module or tensor is sharded (`Value.type_test`):
        it runs only where the object is, which is not known (physicsnemo's checkpoint helpers: `if
        is_distributed: barrier()`, true for FSDP models only).
        """
        name = self._collective_name(event)
        if name is None or self.under_type_test(event) or not can_hold(event.facts):
            return None  # a collective where it does not run, or that never runs: no tests around it hold together
        if event.facts and not can_hold(event.facts + ((GROUP_STARTED, True),)):
            return None  # it runs only where `dist.is_initialized()` is false: no other process to wait for
        return name

    def _collective_name(self, event: Event) -> str | None:
        if event.kind == CALL and event.qname:
            name = event.qname.rsplit(".", 1)[-1]
            if distributed.is_process_group_collective(event.qname) or distributed.is_dcp_collective(event.qname) or distributed.is_fsdp1_collective(event.qname):
                return name
            if distributed.is_state_dict_helper(event.qname) and self.state_dict_options(event) & distributed.COLLECTIVE_STATE_DICT_OPTIONS:
                module = event.args[0].ref if event.args else None
                return None if self.sharded_only_after(event) or module is not None and self.plain_module(module, event.index) else name
            return None
        if event.kind == METHOD and event.target is not None:
            if event.method == "full_tensor" and self.isinstance_known(event, event.target, distributed.DTENSOR_CLASSES, ("full_tensor",)):
                return None  # `if isinstance(x, DTensor): x.full_tensor()`: gathers only where `x` is one, which is not known
            if event.method in ("full_tensor", "summon_full_params"):
                return event.method
            if event.method == "unshard" and self.sharding_of(event.target, event.index, fsdp=2):
                return event.method
            if event.method in ("state_dict", "load_state_dict") and self._fsdp1_full_state_dict(event):
                # Loading a full state dict unshards the parameters first, an all-gather too (torch 2.13's
                # `_full_pre_load_state_dict_hook`; rank 0 alone hangs on 2 gloo ranks: liao1995/Metis).
                #
                # Of the wrapped module itself: its hooks gather. A module inside it (`model.module`,
                # the module FSDP1 wraps: ChenYuHengSJTU/stylegan2-pytorch) runs only the hooks of the
                # units nested in it, which the wrap's policy may or may not have made.
                wrap = self.sharding_of(event.target, event.index, fsdp=1, how=Managed.UNIT)
                # NO_SHARD: every rank holds whole parameters, and its state dict gathers nothing (checked on 2 CPU ranks)
                if wrap is not None and not shards_nothing(wrap, event) and not self._summoned(event, wrap):
                    return event.method
            return None
        if event.kind == CALL_VALUE and event.target is not None and self.sharding_of(event.target, event.index, fsdp=None, how=Managed.UNIT):
            return "forward"  # of the module sharded: calling a part of it (`get = module.method; get()`) runs no hook
        return None

    def under_type_test(self, event: Event) -> bool:
        """`event` runs in the body of an `if` on whether a module or tensor is sharded (`Value.type_test`),
        which the model cannot say: where it runs is not known."""
        return bool(self.type_tested) and any(in_body and id(node) in self.type_tested for node, in_body in event.branches())

    def sharded_only_after(self, event: Event) -> bool:
        """The module a state-dict helper is given is sharded in this flow, or in the flow of the
        function that holds the helper's call (which follows the sharding calls deeper than a caller's
        does), but only after the helper runs: it holds plain tensors there, and gathering them needs
        no other rank (composer reads the full state dict on rank 0 before `prepare_fully_shard`)."""
        own = self.program.flow_of(event.function) if event.function is not None and event.function is not self.function else None
        if own is not None:
            inlined = next((mine for mine in own.of_kind(CALL) if mine.node is event.node), None)
            if inlined is not None and own.sharded_only_after(inlined):
                return True
        module = event.args[0].ref if event.args else None
        if module is None or self.sharding_of(module, event.index, fsdp=None) is not None:
            return False
        return any(event.index < shard.index and any(module.overlaps(target) for target in shard.targets)
                   for shard in self.shard_events())

    def plain_module(self, module: Ref, before: int) -> bool:
        """Before event `before`, `module` is a module this flow constructed (`ref = Llama(args)`, a
        class called) that nothing has sharded, wrapped or been handed: not an FSDP module, and its
        state dict holds plain tensors (templar's reference model on rank 0)."""
        if module.path or not self.has_local_provenance(module):
            return False
        made = self.origin(Value(ref=module), before)
        constructed = made is not None and (made.kind == CALL_VALUE or made.kind == CALL and (made.qname or "").rsplit(".", 1)[-1][:1].isupper())
        return (constructed and not self.handed_on(module, 0, before)
                and not any(module.overlaps(target) for shard in self.shard_events() if shard.index < before
                            for target in shard.targets))

    def _summoned(self, event: Event, wrap: Event) -> bool:
        """`event` runs inside `with FSDP.summon_full_params(m):` of the FSDP1 module `wrap` made: its
        parameters are already whole on this rank, and its `state_dict()` or `load_state_dict()` there
        gathers nothing more (rank 0 alone calls each inside a summon of every rank: no hang, 2 gloo
        ranks, torch 2.13; YuX-Ren/flowprogen's EMA copy)."""
        for context in event.contexts:
            if (context.qname or context.method or "").rsplit(".", 1)[-1] != "summon_full_params":
                continue
            summoned = context.args[0].ref if context.kind == CALL and context.args else context.target
            if summoned is not None and self.sharding_of(summoned, context.index, fsdp=1, how=Managed.UNIT) is wrap:
                return True
        return False

    def _fsdp1_full_state_dict(self, event: Event) -> bool:
        """FSDP1's `state_dict()` and `load_state_dict()` gather unless a `state_dict_type` context (or
        an earlier `set_state_dict_type`) chose a sharded or local state dict."""
        chosen = [context for context in event.contexts if (context.qname or context.method or "").endswith("state_dict_type")]
        chosen = chosen or [e for e in self.events[:event.index] if (e.qname or e.method or "").endswith("set_state_dict_type")]
        return not chosen or chooses_full_state_dict(chosen[-1])


def _always_enters(statement: cst.CSTNode, inner: cst.CSTNode) -> bool:
    """Reaching `statement` runs `inner`, the next statement on a path down from it: the body of a
    `with` or of a `try`, or the body of the function a simple statement calls."""
    if type(statement) in (cst.SimpleStatementLine, cst.With):
        return True
    return type(statement) in (cst.Try, cst.TryStar) and holds_statement(statement.body, inner)


def _handles_errors_of(statement: cst.CSTNode, inner: cst.CSTNode) -> bool:
    """`inner` is in the body of a `try` with handlers: an error there goes on in a handler, past
    any loop in it (Wan2.1's `mp_worker` serves a `while True:` in a `try` and returns from its
    `except`, its group never destroyed)."""
    return type(statement) in (cst.Try, cst.TryStar) and bool(statement.handlers) and holds_statement(statement.body, inner)
