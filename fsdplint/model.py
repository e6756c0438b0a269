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
"""

from __future__ import annotations

import builtins
import copy
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

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
)
_BUILTINS = frozenset(dir(builtins))
# Builtins that pass an iterable through: iterating `enumerate(model.layers)` iterates the layers.
_ITERABLE_WRAPPERS = frozenset({"enumerate", "reversed", "list", "sorted", "tuple", "iter", "zip", "filter"})
# Module methods whose result is the module itself (`model = model.to(device)` keeps its identity).
_RETURNS_SELF = frozenset({"to", "cuda", "cpu", "to_empty", "train", "eval", "float", "half", "bfloat16", "requires_grad_", "apply"})
# Module methods whose result iterates sub-modules.
_ITERATES_SUBMODULES = frozenset({"modules", "children", "named_modules", "named_children", "values", "items"})
_PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})
# Methods whose result no longer holds a shard of the parameters it came from.
_GATHERS = frozenset({"full_tensor", "to_local", "item", "tolist", "numpy"})
_MAX_INLINE_DEPTH = 4

SHARD = "shard"  # fully_shard(target) (FSDP2)
WRAP = "wrap"  # FullyShardedDataParallel(target) (FSDP1)
OPTIMIZER = "optimizer"  # an optimizer built over the parameters of `params_of`
METHOD = "method"  # target.method(...)
CALL_VALUE = "call_value"  # target(...): a forward when target is a module
CALL = "call"  # a call of something that is not a local value: qname(args)
META = "meta"  # target was built on the meta device
ASSIGN = "assign"  # `target = ...` where target is an attribute (`model.tok_embeddings = new`)
ENTER = "enter"  # a call of a function of this run, whose events follow inlined: qname(args)


def canonical(qname: str) -> str:
    for prefix, replacement in _CANONICAL_PREFIXES:
        if qname.startswith(prefix):
            return replacement + qname[len(prefix):]
    return qname


def dotted_name(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


@dataclass(frozen=True)
class Ref:
    """A tracked value: `root` is a flow-unique variable, `path` the attributes reached from it."""

    root: str
    path: tuple[str, ...] = ()

    def child(self, name: str) -> Ref:
        return Ref(self.root, self.path + (name,))

    @property
    def is_submodule(self) -> bool:
        return bool(self.path)

    def is_within(self, other: Ref) -> bool:
        """True when self is other or reached from it (`[]` matches any one step)."""
        if self.root != other.root or len(self.path) < len(other.path):
            return False
        return all(mine == theirs or "[]" in (mine, theirs) for mine, theirs in zip(self.path, other.path))


@dataclass
class Value:
    """What an expression evaluates to, as far as the model cares."""

    ref: Ref | None = None
    params_of: frozenset[Ref] = frozenset()  # parameters of these modules flow into the value
    iterates: Ref | None = None  # iterating the value yields sub-modules of this ref
    event: Event | None = None  # the event that produced the value
    elements: tuple[Value, ...] | None = None  # a tuple or list literal, element by element


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
    index: int = 0
    targets: tuple[Ref, ...] = ()  # SHARD/WRAP targets, METHOD receiver, CALL_VALUE callee
    qname: str | None = None
    method: str | None = None
    args: tuple[Value, ...] = ()
    kwargs: dict[str, Value] = field(default_factory=dict)
    params_of: frozenset[Ref] = frozenset()  # OPTIMIZER
    binding: Ref | None = None  # what the call's result was assigned to
    with_item: bool = False  # the call is the context manager of a `with`
    function: FunctionInfo | None = None  # the function whose body holds the node (None: module level)

    @property
    def target(self) -> Ref | None:
        return self.targets[0] if self.targets else None

    def arg_refs(self) -> Iterator[Ref]:
        for value in itertools.chain(self.args, self.kwargs.values()):
            if value.ref:
                yield value.ref


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
        # Positions are resolved only for files that have a finding.
        if self._positions is None:
            self._positions = MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider)
        return self._positions[node]


def module_name_for(path: Path) -> str:
    """`pkg/sub/mod.py` -> `pkg.sub.mod`, walking up while the folder is a package."""
    parts = [path.stem] if path.stem != "__init__" else []
    folder = path.resolve().parent
    while (folder / "__init__.py").exists():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)


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
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Import):
                        self.import_(small)
                    elif isinstance(small, cst.ImportFrom):
                        self.import_from(small)
                    elif isinstance(small, cst.Assign):
                        self.assign(small)
            elif isinstance(statement, cst.ClassDef):
                self.scopes.append(("class", statement.name.value))
                self.index(_body(statement.body))
                self.scopes.pop()
            elif isinstance(statement, cst.FunctionDef):
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
            if alias.asname and isinstance(alias.asname.name, cst.Name):
                self.model.imports[alias.asname.name.value] = full
            else:
                head = full.split(".")[0]
                self.model.imports.setdefault(head, head)

    def import_from(self, node: cst.ImportFrom) -> None:
        base = dotted_name(node.module) if node.module else ""
        base = "." * len(node.relative) + (base or "")
        if isinstance(node.names, cst.ImportStar):
            self.model.star_imports.append(canonical(base))
            return
        for alias in node.names:
            name = dotted_name(alias.name)
            if not name:
                continue
            local = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name
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
        if isinstance(node.value, cst.Call):
            callee = (dotted_name(node.value.func) or "?").rsplit(".", 1)[-1]
            for target in node.targets:
                if isinstance(target.target, cst.Attribute):
                    self.model.attribute_types.setdefault(target.target.attr.value, set()).add(callee)


def _body(suite: cst.CSTNode) -> list[cst.CSTNode]:
    return list(suite.body) if isinstance(suite, cst.IndentedBlock) else [cst.SimpleStatementLine(suite.body)] if isinstance(suite, cst.SimpleStatementSuite) else []


def _suites(statement: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The blocks of a compound statement, in order."""
    if isinstance(statement, cst.If):
        yield statement.body
        if isinstance(statement.orelse, cst.If):
            yield from _suites(statement.orelse)
        elif statement.orelse is not None:
            yield statement.orelse.body
    elif isinstance(statement, (cst.For, cst.While)):
        yield statement.body
        if statement.orelse is not None:
            yield statement.orelse.body
    elif isinstance(statement, cst.With):
        yield statement.body
    elif isinstance(statement, (cst.Try, cst.TryStar)):
        yield statement.body
        for handler in statement.handlers:
            yield handler.body
        if statement.orelse is not None:
            yield statement.orelse.body
        if statement.finalbody is not None:
            yield statement.finalbody.body
    elif isinstance(statement, cst.Match):
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
        self.returned = Value()
        # root -> qualified name of the call that built it (`torch.nn.Linear`)
        self.constructed: dict[str, str] = {}
        # root -> roots of the values it was computed from (`module = get_module(model, path)`)
        self.derived_from: dict[str, set[str]] = {}

    @property
    def is_entry(self) -> bool:
        """No flow of this run calls it: nothing outside it can have shaped its values."""
        return self.function is None or not self.function.called

    def has_local_provenance(self, ref: Ref) -> bool:
        """The value was made inside this flow (not a parameter, global or attribute of self)."""
        return ref.root in self.assigned_roots and ref.root not in self.parameter_roots

    def of_kind(self, *kinds: str) -> Iterator[Event]:
        return (event for event in self.events if event.kind in kinds)

    def shard_events(self, fsdp: int | None = None) -> Iterator[Event]:
        kinds = {2: (SHARD,), 1: (WRAP,), None: (SHARD, WRAP)}[fsdp]
        return self.of_kind(*kinds)

    def sharding_of(self, ref: Ref, before: int, fsdp: int | None = 2) -> Event | None:
        """The shard event that manages `ref` (it or a module it lives in) before event `before`.

        Falls back to what other methods of the same class shard on `self`.
        """
        for event in reversed(self.events[:before]):
            if event.kind in ((SHARD, WRAP) if fsdp is None else ((SHARD,) if fsdp == 2 else (WRAP,))):
                if any(ref.is_within(target) for target in event.targets):
                    return event
        if ref.root == "self" and self.function and self.function.class_name:
            for event in self.program.class_shards.get((self.file.module_name, self.function.class_name), ()):
                if (fsdp is None or (event.kind == SHARD) == (fsdp == 2)) and any(
                    ref.is_within(target) for target in event.targets
                ):
                    return event
        return None

    def escapes(self, ref: Ref, start: int = 0, end: int | None = None) -> bool:
        """`ref` was handed to a function this run cannot see, between events `start` and `end`."""
        for event in self.events[start:end]:
            if event.kind == CALL and not (event.qname or "").startswith("torch."):
                if any(arg.root == ref.root for arg in event.arg_refs()):
                    return True
        return False


class Program:
    """Every parsed file of the run and the flows built from them."""

    def __init__(self, files: list[FileModel]) -> None:
        self.files = files
        self._call_ids = itertools.count(1)
        self.functions_by_name: dict[str, list[FunctionInfo]] = {}
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
        walker.walk_suite(body, ())
        flow.returned = walker.returned
        for index, event in enumerate(flow.events):
            event.index = index
        return flow

    def only(self, file: FileModel) -> Program:
        """This program seen from one file: its flows only (callees from other files stay inlined)."""
        view = copy.copy(self)
        view.files = [file]
        view.flows = [flow for flow in self.flows if flow.file is file]
        return view

    def next_call_id(self) -> int:
        return next(self._call_ids)

    def resolve_function(self, file: FileModel, caller: FunctionInfo | None, call: cst.Call) -> FunctionInfo | None:
        """The function of this run a call reaches: nested, same class, same file, imported, or unique."""
        func = call.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            if caller and caller.class_name:
                return file.functions.get(f"{caller.class_name}.{func.attr.value}")
            return None
        if isinstance(func, cst.Name):
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
        module, _, name = qualified.rpartition(".")
        candidates = [f for f in self.functions_by_name.get(name, ()) if f.qualname == name]
        module = module.lstrip(".")
        same_module = [f for f in candidates if module and (f.file.module_name == module or f.file.module_name.endswith("." + module) or module.endswith("." + f.file.module_name) or f.file.module_name.split(".")[-1] == module.split(".")[-1])]
        if len(same_module) == 1:
            return same_module[0]
        return candidates[0] if len(candidates) == 1 and not qualified.startswith("torch.") else None


class _Walker:
    """Walks one function body in textual order, appending events to the flow, inlining callees."""

    def __init__(self, flow: Flow, file: FileModel, function: FunctionInfo | None, env: dict[str, Value], prefix: str, chain: tuple[str, ...], depth: int, stack: tuple[int, ...] = ()) -> None:
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

    # statements

    def walk_suite(self, suite: cst.CSTNode, parents: tuple[cst.CSTNode, ...]) -> None:
        if isinstance(suite, (cst.Module, cst.IndentedBlock)):
            for statement in suite.body:
                self.statement(statement, parents)
        elif isinstance(suite, cst.SimpleStatementSuite):
            # `if x: a(); b()`: the compound statement holds them; `def f(): a()`: the def itself.
            holder, outer = (parents[-1], parents[:-1]) if parents else (self.function.node, ())
            for small in suite.body:
                self.small_statement(small, holder, outer)

    def statement(self, node: cst.CSTNode, parents: tuple[cst.CSTNode, ...]) -> None:
        inner = parents + (node,)
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                self.small_statement(small, node, parents)
        elif isinstance(node, cst.If):
            self.expr(node.test, node, parents)
            self.walk_suite(node.body, inner)
            if node.orelse is not None:
                if isinstance(node.orelse, cst.If):
                    self.statement(node.orelse, parents)
                else:
                    self.walk_suite(node.orelse.body, inner)
        elif isinstance(node, cst.For):
            iterable = self.expr(node.iter, node, parents)
            self.bind(node.target, self.element_of(iterable))
            self.walk_suite(node.body, inner)
            if node.orelse:
                self.walk_suite(node.orelse.body, inner)
        elif isinstance(node, cst.While):
            self.expr(node.test, node, parents)
            self.walk_suite(node.body, inner)
        elif isinstance(node, cst.With):
            meta = 0
            for item in node.items:
                value = self.expr(item.item, node, parents, with_item=True)
                meta += self.is_meta_device(item.item)
                if item.asname:
                    self.bind(item.asname.name, value)
            self.meta_depth += meta
            self.walk_suite(node.body, inner)
            self.meta_depth -= meta
        elif isinstance(node, (cst.Try, cst.TryStar)):
            self.walk_suite(node.body, inner)
            for handler in node.handlers:
                self.walk_suite(handler.body, inner)
            if node.orelse:
                self.walk_suite(node.orelse.body, inner)
            if node.finalbody:
                self.walk_suite(node.finalbody.body, inner)
        elif isinstance(node, cst.Match):
            self.expr(node.subject, node, parents)
            for case in node.cases:
                self.walk_suite(case.body, inner)

    def small_statement(self, node: cst.CSTNode, statement: cst.CSTNode, parents: tuple[cst.CSTNode, ...]) -> None:
        if isinstance(node, cst.Expr):
            self.expr(node.value, statement, parents)
        elif isinstance(node, cst.Assign):
            value = self.expr(node.value, statement, parents)
            for target in node.targets:
                self.bind(target.target, value, statement, parents)
        elif isinstance(node, cst.AnnAssign) and node.value is not None:
            self.bind(node.target, self.expr(node.value, statement, parents), statement, parents)
        elif isinstance(node, cst.AugAssign):
            self.expr(node.value, statement, parents)
        elif isinstance(node, cst.Return) and node.value is not None:
            self.returned = self.expr(node.value, statement, parents)
        elif isinstance(node, (cst.Raise, cst.Assert)):
            for child in node.children:
                self.expr(child, statement, parents)

    def bind(self, target: cst.CSTNode, value: Value, statement: cst.CSTNode | None = None, parents: tuple = ()) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            elements = [element.value for element in target.elements]
            if value.elements is not None and len(value.elements) == len(elements):
                for element, element_value in zip(elements, value.elements):
                    self.bind(element, element_value, statement, parents)
                return
            # `for name, module in ...` / `for i, layer in enumerate(...)`: the last name is the element.
            for position, element in enumerate(elements):
                last = position == len(elements) - 1
                self.bind(element, value if last and (value.ref or value.params_of) else Value(), statement, parents)
            return
        if isinstance(target, (cst.Attribute, cst.Subscript)) and statement is not None:
            assigned = self.ref_of(target)
            if assigned is not None:  # `model.tok_embeddings = new`: a sub-module replaced
                self.emit(ASSIGN, target, statement, parents, targets=(assigned,))
        key = dotted_name(target)
        if key is None:
            return
        if value.ref is not None:
            bound = value
        else:
            root = self.prefix + key if isinstance(target, cst.Name) else None
            ref = Ref(root) if root else self.ref_of(target)
            if root:
                self.flow.assigned_roots.add(root)
                self.record_origin(root, value.event)
            bound = Value(ref=ref, params_of=value.params_of, iterates=value.iterates, elements=value.elements)
        self.env[key] = bound
        if value.event is not None and value.event.binding is None:
            value.event.binding = bound.ref
            if value.event.kind == OPTIMIZER and bound.ref:
                self.flow.optimizer_bindings.add(bound.ref)
        if statement is not None and bound.ref is not None and (self.meta_depth or value.event and value.event.kind == META):
            self.emit(META, target, statement, parents, targets=(bound.ref,))

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
        sources = {ref.root for ref in event.arg_refs()} | ({event.target.root} if event.kind == METHOD and event.target else set())
        if sources:
            self.flow.derived_from[root] = sources

    # expressions

    def ref_of(self, node: cst.CSTNode) -> Ref | None:
        key = dotted_name(node)
        if key is not None and key in self.env:
            return self.env[key].ref
        if isinstance(node, cst.Name):
            name = node.value
            if name in self.file.imports or name in _BUILTINS or name in self.file.functions:
                return None
            return Ref(self.prefix + name)
        if isinstance(node, cst.Attribute):
            base = self.ref_of(node.value)
            return base.child(node.attr.value) if base else None
        if isinstance(node, cst.Subscript):
            base = self.ref_of(node.value)
            return base.child("[]") if base else None
        return None

    def element_of(self, iterable: Value) -> Value:
        source = iterable.iterates or iterable.ref
        return Value(ref=source.child("[]")) if source else Value()

    def expr(self, node: cst.CSTNode, statement: cst.CSTNode, parents: tuple, with_item: bool = False) -> Value:
        if isinstance(node, (cst.Name, cst.Attribute)):
            key = dotted_name(node)
            if key is not None and key in self.env:
                return self.env[key]
            if isinstance(node, cst.Attribute):
                self.expr(node.value, statement, parents)
            return Value(ref=self.ref_of(node))
        if isinstance(node, cst.Subscript):
            base = self.expr(node.value, statement, parents)
            for element in node.slice:
                self.expr(element, statement, parents)
            return Value(ref=base.ref.child("[]")) if base.ref else Value()
        if isinstance(node, cst.Call):
            return self.call(node, statement, parents, with_item)
        if isinstance(node, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
            return Value()
        if isinstance(node, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            return self.comprehension(node, statement, parents)
        if isinstance(node, (cst.Tuple, cst.List)):
            elements = tuple(self.expr(element.value, statement, parents) for element in node.elements)
            params = frozenset().union(*(element.params_of for element in elements))
            return Value(params_of=params, elements=elements, iterates=_common_ref([e.ref for e in elements]))
        # Anything else: evaluate the parts and pass parameter flows through (dicts, operators, f-strings).
        params: frozenset[Ref] = frozenset()
        for part in _subexpressions(node):
            params |= self.expr(part, statement, parents).params_of
        return Value(params_of=params)

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
        parts = (node.key, node.value) if isinstance(node, cst.DictComp) else (node.elt,)
        values = [self.expr(part, statement, parents) for part in parts]
        params = frozenset().union(*(value.params_of for value in values))
        # `[m for m in model.layers if ...]` still iterates sub-modules of `model`.
        return Value(params_of=params, iterates=_common_ref([value.ref for value in values]))

    def call(self, node: cst.Call, statement: cst.CSTNode, parents: tuple, with_item: bool) -> Value:
        func = node.func
        receiver = self.expr(func.value, statement, parents) if isinstance(func, cst.Attribute) else Value()
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
        if qname is None and isinstance(func, cst.Name) and func.value in _ITERABLE_WRAPPERS and args:
            return Value(iterates=args[0].iterates or args[0].ref, params_of=flowing)
        if self.builds_on_meta(node):
            return Value(event=Event(META, node, self.file, statement, parents, self.chain))
        callee = self.flow.program.resolve_function(self.file, self.function, node)
        if callee is not None:
            return self.inline(callee, node, args, kwargs, receiver, statement, parents)
        # Parameters handed over directly, not an existing optimizer handed to a helper.
        handed = frozenset().union(*(v.params_of for v in (*args, *kwargs.values()) if v.ref not in self.flow.optimizer_bindings))
        if self.is_optimizer(qname, node, handed):
            event = self.emit(OPTIMIZER, node, params_of=handed, **common)
            return Value(event=event, params_of=handed)
        if isinstance(func, cst.Attribute) and receiver.ref is not None and qname is None:
            method = func.attr.value
            event = self.emit(METHOD, node, targets=(receiver.ref,), method=method, **common)
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
        if (isinstance(func, cst.Attribute) and qname is None and func.attr.value in _RETURNS_SELF
                and receiver.event is not None and receiver.event.kind == CALL):
            return receiver  # `nn.Linear(4, 4).to(device)` is still the module `nn.Linear(...)` built
        callee_ref = self.ref_of(func) if qname is None else None
        if callee_ref is not None:
            return Value(event=self.emit(CALL_VALUE, node, targets=(callee_ref,), **common))
        event = self.emit(CALL, node, **{**common, "qname": qname or dotted_name(func)})
        return Value(event=event, params_of=flowing if qname is None else frozenset())

    @staticmethod
    def is_meta_literal(node: cst.CSTNode) -> bool:
        return isinstance(node, cst.SimpleString) and node.evaluated_value == "meta"

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
            isinstance(node, cst.Call)
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

    def inline(self, callee: FunctionInfo, node: cst.Call, args: tuple[Value, ...], kwargs: dict[str, Value], receiver: Value, statement: cst.CSTNode, parents: tuple) -> Value:
        callee.called = True
        if self.depth >= _MAX_INLINE_DEPTH or id(callee.node) in self.stack:
            event = self.emit(CALL, node, statement=statement, parents=parents, qname=callee.qualname, args=args, kwargs=kwargs)
            return Value(event=event)
        self.emit(ENTER, node, statement=statement, parents=parents, qname=callee.qualname, args=args, kwargs=kwargs)
        prefix = f"{callee.name}@{self.flow.program.next_call_id()}:"
        env: dict[str, Value] = {}
        params = list(callee.params)
        if callee.class_name and params and params[0] in ("self", "cls"):
            self_name = params.pop(0)
            if isinstance(node.func, cst.Attribute):
                env[self_name] = receiver if receiver.ref else Value(ref=Ref(prefix + self_name))
                # What the caller knows of `self.x` holds in the callee too.
                env.update({key: value for key, value in self.env.items() if key.startswith("self.")})
        for name, value in zip(params, args):
            env[name] = value
        for name, value in kwargs.items():
            if name in params:
                env[name] = value
        for name in params:
            if name not in env or env[name].ref is None:
                given = env.get(name, Value())
                env[name] = Value(ref=Ref(prefix + name), params_of=given.params_of)
                self.flow.assigned_roots.add(prefix + name)
                self.record_origin(prefix + name, given.event)
        walker = _Walker(self.flow, callee.file, callee, env, prefix, self.chain + (callee.name,), self.depth + 1, self.stack)
        walker.walk_suite(callee.node.body, ())
        return walker.returned

    def emit(self, kind: str, node: cst.CSTNode, statement: cst.CSTNode, parents: tuple, **fields) -> Event:
        event = Event(kind, node, self.file, statement, parents, self.chain, function=self.function, **fields)
        self.flow.events.append(event)
        return event


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


_LEAVES = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.Ellipsis)


def _subexpressions(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The expressions directly inside `node`, without LibCST's costly generic `children`."""
    if isinstance(node, _LEAVES):
        return []
    if isinstance(node, (cst.BinaryOperation, cst.BooleanOperation, cst.ConcatenatedString)):
        return [node.left, node.right]
    if isinstance(node, cst.Comparison):
        return [node.left, *(target.comparator for target in node.comparisons)]
    if isinstance(node, (cst.UnaryOperation, cst.Await)):
        return [node.expression]
    if isinstance(node, cst.IfExp):
        return [node.test, node.body, node.orelse]
    if isinstance(node, cst.Dict):
        return [part for element in node.elements for part in ((element.key, element.value) if isinstance(element, cst.DictElement) else (element.value,))]
    if isinstance(node, cst.Set):
        return [element.value for element in node.elements]
    if isinstance(node, cst.FormattedString):
        return [part.expression for part in node.parts if isinstance(part, cst.FormattedStringExpression)]
    if isinstance(node, (cst.StarredElement, cst.NamedExpr, cst.Yield, cst.Expr)):
        return [node.value] if node.value is not None else []
    return [child for child in node.children if isinstance(child, cst.BaseExpression)]
