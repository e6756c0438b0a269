"""One parsed file: its imports, functions and classes, indexed in one pass over its statements."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, Sequence

import libcst as cst
from libcst.metadata import CodeRange, PositionProvider

from fsdplint.model.names import FSDP1_WRAPPER, FULLY_SHARD, canonical, dotted_name
from fsdplint.model.syntax import decorator_name, nodes_under, statements_of, string_value, suites_of
from fsdplint.plan import FileText, defined_names, module_name_for
from fsdplint.source import SourceFile


@dataclass
class FunctionInfo:
    file: FileModel
    node: cst.FunctionDef
    name: str
    qualname: str  # `Trainer.save`, `main.inner`
    params: list[str]
    class_name: str | None
    # The functions whose bodies call it, as some flow of this run walked them (by node id; None: a module body).
    callers: dict[int, FunctionInfo | None] = field(default_factory=dict, compare=False, repr=False)

    @property
    def owner(self) -> str | None:
        """The qualified name of its class, for a method (`Tests.test.Model` of a class defined in a method)."""
        return self.qualname.rsplit(".", 1)[0] if self.class_name is not None else None

    @property
    def called(self) -> bool:
        """Some flow in this run calls it (and so inlines it)."""
        return bool(self.callers)

    def decorated_by(self, *names: str) -> bool:
        """A decorator of the function is one of `names`, by its last name (`staticmethod`,
        `rank_zero_only` of `@utils.rank_zero_only`)."""
        return any(decorator_name(decorator) in names for decorator in self.node.decorators)

    def returns_its_class(self) -> bool:
        """A classmethod that returns an object of its class wherever it returns (`return cls(...)`, `policy
        if distributed else cls()` where `policy = cls(...)`)."""
        if not self.decorated_by("classmethod") or not self.params:
            return False
        own = self.params[0]
        built = {target.target.value for node in nodes_under(self.node.body, cst.Assign) for target in node.targets
                 if type(target.target) is cst.Name and type(node.value) is cst.Call and dotted_name(node.value.func) == own}

        def builds(value: cst.CSTNode | None) -> bool:
            if type(value) is cst.IfExp:
                return builds(value.body) and builds(value.orelse)
            return type(value) is cst.Call and dotted_name(value.func) == own or type(value) is cst.Name and value.value in built

        returns = list(nodes_under(self.node.body, cst.Return))
        return bool(returns) and all(builds(node.value) for node in returns)

    def runs_at_construction(self, seen: frozenset[int] = frozenset()) -> bool:
        """It is its class's `__init__`, or only that calls it, directly or through methods of the class
        only that calls: it runs while the object is built, before any other method of it can run."""
        if self.class_name is None:
            return False
        if self.name == "__init__":
            return True
        seen = seen | {id(self.node)}
        return bool(self.callers) and all(
            caller is not None and caller.file is self.file and caller.owner == self.owner and id(caller.node) not in seen
            and caller.runs_at_construction(seen) for caller in self.callers.values())


@dataclass(eq=False)  # one object per file, compared and hashed by identity
class FileModel:
    source: SourceFile
    module: cst.Module
    module_name: str
    # Local name -> what it imports: the module's imports, and a function's where the module binds no such name.
    imports: dict[str, str] = field(default_factory=dict)
    # A name written in a function that imports it itself (`from train import main` in one test, `from
    # export import main` in another): what it imports there, by the id of the Name node.
    scoped_imports: dict[int, str] = field(default_factory=dict)
    star_imports: list[str] = field(default_factory=list)
    functions: dict[str, FunctionInfo] = field(default_factory=dict)  # by qualname
    # `self.X = Y(...)` in any class: the last name of each Y assigned to attribute X
    attribute_types: dict[str, set[str]] = field(default_factory=dict)
    classes: dict[str, cst.ClassDef] = field(default_factory=dict)  # by qualname (`Model`, `Outer.Inner`)
    # `NAME = {...}` at the top level: dict literals a function may read as a global (a dispatch table)
    module_dicts: dict[str, cst.Dict] = field(default_factory=dict)
    _positions: object = None
    _statement_texts: dict[int, str] | None | bool = None  # statement_texts(), made once
    _qualified: dict[int, tuple[cst.CSTNode, str | None]] = field(default_factory=dict)

    @property
    def display(self) -> str:
        return self.source.display

    @property
    def imports_fsdp(self) -> bool:
        """The file imports `fully_shard` or `FullyShardedDataParallel` (under any name)."""
        return any(canonical(name) in (FULLY_SHARD, FSDP1_WRAPPER) for name in self.imports.values())

    @property
    def is_test(self) -> bool:
        """A test module by pytest's names (`test_*.py`, `*_test.py`, `conftest.py`): what it runs,
        pytest runs on one machine. (A `tests/` folder also holds fixtures and scripts: not by folder.)"""
        name = Path(self.source.display).name
        return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"

    @property
    def runs_as_script(self) -> bool:
        """The file has a top-level `if __name__ == "__main__":`: it is written to be run (`python
        train.py`, `torchrun train.py`), and its top level then runs before anything else of the run."""
        for statement in self.module.body:
            test = statement.test if type(statement) is cst.If else None
            if type(test) is cst.Comparison and len(test.comparisons) == 1 and type(test.comparisons[0].operator) is cst.Equal:
                sides = (test.left, test.comparisons[0].comparator)
                if {type(side) for side in sides} == {cst.Name, cst.SimpleString} and \
                        {side.value if type(side) is cst.Name else string_value(side) for side in sides} == {"__name__", "__main__"}:
                    return True
        return False

    def qualify(self, node: cst.CSTNode) -> str | None:
        """The canonical qualified name of an imported name or attribute chain, else None."""
        # Asked of each call again in every flow that inlines it: kept per node (the node too, so
        # that its id is never another's).
        known = self._qualified.get(id(node))
        if known is not None and known[0] is node:
            return known[1]
        qualified = self._qualify(node)
        self._qualified[id(node)] = (node, qualified)
        return qualified

    def imported_as(self, name: cst.Name) -> str | None:
        """What the name, where it is written, imports: its function's own import of it, else the module's."""
        return self.scoped_imports.get(id(name)) or self.imports.get(name.value)

    def _qualify(self, node: cst.CSTNode) -> str | None:
        name = dotted_name(node)
        if not name:
            return None
        head = name.partition(".")[0]
        head_node = node
        while type(head_node) is cst.Attribute:
            head_node = head_node.value
        imported = self.imported_as(head_node) if type(head_node) is cst.Name else self.imports.get(head)
        return self._qualified_from(imported, name)

    def qualify_written(self, name: str) -> str | None:
        """`qualify` of a dotted name as written at the module's level (`Policy.from_params`)."""
        return self._qualified_from(self.imports.get(name.partition(".")[0]), name)

    def _qualified_from(self, imported: str | None, name: str) -> str | None:
        rest = name.partition(".")[2]
        if imported is not None:
            return canonical(imported + ("." + rest if rest else ""))
        for module in self.star_imports:
            if module.startswith("torch.distributed"):
                return canonical(f"{module}.{name}")
        return None

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def statement_texts(self) -> dict[int, str] | None:
        """The file's own text of each top-level statement, by the statement's id; None where the
        pieces, with the module's header and footer lines, do not make up the text exactly."""
        if self._statement_texts is None:
            module = self.module
            texts = {id(statement): module.code_for_node(statement) for statement in module.body}
            whole = lines_code(module, module.header) + "".join(texts.values()) + lines_code(module, module.footer)
            self._statement_texts = texts if whole == self.source.text else False
        return self._statement_texts or None

    def position(self, node: cst.CSTNode) -> CodeRange:
        # Positions are resolved only for files that have a finding, by PositionProvider's own codegen
        # pass: MetadataWrapper.resolve adds a full visit of the tree for batchable providers even when
        # none is asked for, which doubled the cost of a 1,000-line file's positions.
        if self._positions is None:
            provider = PositionProvider()
            provider._gen_impl(self.module)
            self._positions = provider._computed
        return self._positions[node]


@dataclass(eq=False)
class UnparsedFile:
    """A file of the run parsed only when the model first needs it: when a name it may define is looked
    up, or a word its text holds is asked for. Most functions of a callee file are never reached."""

    source: SourceFile
    parse: Callable[[SourceFile], FileModel | None]  # None where it cannot be parsed (the caller reports why)
    defines: frozenset[str] = field(init=False)  # the names its `def`s and `class`es may define
    _loaded: tuple[FileModel | None] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.defines = defined_names(self.source.text)

    # Asked only of files a lookup may parse: a line scan and a walk up the folders each.
    @cached_property
    def top_level(self) -> frozenset[str]:
        """The functions it may define at top level."""
        return frozenset(FileText(self.source.text).exported)

    @cached_property
    def module_name(self) -> str:
        return module_name_for(self.source.path)

    def load(self) -> FileModel | None:
        """The file's model, parsed on the first call only (None where it cannot be parsed)."""
        if self._loaded is None:
            self._loaded = (self.parse(self.source),)
        return self._loaded[0]


def build_file_model(source: SourceFile, module: cst.Module) -> FileModel:
    model = FileModel(source=source, module=module, module_name=module_name_for(source.path))
    _FileIndexer(model).index_file(module)
    return model


class _FileIndexer:
    """One pass over a file's statements (never its expressions): imports, functions, classes and
    the attributes classes assign. LibCST's generic visitor rebuilds every node and costs ~30x more."""

    def __init__(self, model: FileModel) -> None:
        self.model = model
        self.scopes: list[tuple[str, str]] = []  # ("class"|"def", name)
        self.functions: list[cst.FunctionDef] = []  # the functions around the statement, innermost last
        self.own_imports: dict[int, tuple[cst.FunctionDef, dict[str, str]]] = {}  # by function: what it imports itself

    def index_file(self, module: cst.Module) -> None:
        self.index(module.body)
        targets: dict[str, set[str]] = {local: {full} for local, full in self.model.imports.items()}
        for _, imported in self.own_imports.values():
            for local, full in imported.items():
                self.model.imports.setdefault(local, full)
                targets.setdefault(local, set()).add(full)
        for function, imported in self.own_imports.values():
            differing = {local: full for local, full in imported.items() if len(targets[local]) > 1}
            if not differing:
                continue  # what it imports, any function reads so: nothing to tell apart
            for node in nodes_under(function.body, cst.Name):  # nested functions too: they see its imports
                if node.value in differing:
                    self.model.scoped_imports[id(node)] = differing[node.value]

    def bind_import(self, local: str, full: str, keep_first: bool = False) -> None:
        if self.functions:
            function = self.functions[-1]
            bound = self.own_imports.setdefault(id(function), (function, {}))[1]
            bound[local] = bound.get(local, full) if keep_first else full
        elif keep_first:
            self.model.imports.setdefault(local, full)
        else:
            self.model.imports[local] = full

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
                    elif type(small) is cst.AnnAssign:
                        self.annotated_assign(small)
            elif type(statement) is cst.ClassDef:
                self.model.classes[".".join([name for _, name in self.scopes] + [statement.name.value])] = statement
                self.scopes.append(("class", statement.name.value))
                self.index(statements_of(statement.body))
                self.scopes.pop()
            elif type(statement) is cst.FunctionDef:
                self.function(statement)
                self.scopes.append(("def", statement.name.value))
                self.functions.append(statement)
                self.index(statements_of(statement.body))
                self.functions.pop()
                self.scopes.pop()
            else:  # if/for/while/with/try/match: imports and definitions inside them count too
                for suite in suites_of(statement):
                    self.index(statements_of(suite))

    def import_(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted_name(alias.name)
            if not full:
                continue
            if alias.asname and type(alias.asname.name) is cst.Name:
                self.bind_import(alias.asname.name.value, full)
            else:
                head = full.split(".")[0]
                self.bind_import(head, head, keep_first=True)

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
            self.bind_import(local, canonical(f"{base}{separator}{name}"))

    def function(self, node: cst.FunctionDef) -> None:
        qualname = ".".join([name for _, name in self.scopes] + [node.name.value])
        class_name = self.scopes[-1][1] if self.scopes and self.scopes[-1][0] == "class" else None
        params = [p.name.value for p in (*node.params.posonly_params, *node.params.params, *node.params.kwonly_params)]
        self.model.functions[qualname] = FunctionInfo(
            file=self.model, node=node, name=node.name.value, qualname=qualname, params=params, class_name=class_name
        )

    def assign(self, node: cst.Assign) -> None:
        if not self.scopes and type(node.value) is cst.Dict and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name:
            self.model.module_dicts[node.targets[0].target.value] = node.value
        for target in node.targets:
            if type(target.target) in (cst.Tuple, cst.List):
                for element in target.target.elements:
                    self.attribute_assigned(element.value, None)  # a part of a value: its type not known
            else:
                self.attribute_assigned(target.target, node.value)

    def annotated_assign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.attribute_assigned(node.target, node.value)

    def attribute_assigned(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        """Every assignment to an attribute counts in `attribute_types`: the last name of the call that
        built the value, or "?" for a value no call built (`self.module = module`), of a type not known,
        so that what another class assigns the name is no guess of it (OneScience's `self.module =
        nn.ModuleList(...)` in DualPipeV, not its data-parallel wrapper's)."""
        if type(target) is cst.Attribute:
            built = (dotted_name(value.func) or "?").rsplit(".", 1)[-1] if type(value) is cst.Call else "?"
            self.model.attribute_types.setdefault(target.attr.value, set()).add(built)


def lines_code(module: cst.Module, lines: Sequence[cst.EmptyLine]) -> str:
    """The code of a module's header or footer lines."""
    return "".join(module.code_for_node(line) for line in lines)
