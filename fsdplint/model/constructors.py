"""What an object of a class of the run holds in its attributes when its constructor returns, read
from the constructor's code once per class and applied at each construction by substituting the
call's arguments (HydraGNN's `LSMS_RawDataLoader(config)`: `dist=False` by default, handed to the
base's `__init__`, which keeps it in `self.dist`; its `load_raw_data` runs `all_reduce` only `if
self.dist:`).

Only what holds whatever runs: an attribute assigned by a top-level statement of the constructor (or
of a base's constructor it calls, `super().__init__(...)` or `Base.__init__(self, ...)`), from a
parameter, a literal, or an expression that reads the rank (dlrover's `self.local_shard_id =
self._local_rank % local_shard_num`, which differs between ranks), and assigned nowhere else in the
class or its bases. A class with a base that is not a class of the run (other than `nn.Module` and
`object`) may set anything: nothing is known of it. The literals and the rank's expressions hold in
every method of every object of the class (`attributes_of_every_object`); a parameter's value, at the
construction that gives it (`attributes_at`). A `@dataclass` without an `__init__` of its own has the
one the decorator generates: a parameter per field, in the order of the class body, each stored in
the attribute of its name (JHNMACHINE/harold's `TrainState(model=model, ...)`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Mapping, Sequence

import libcst as cst

from fsdplint import distributed
from fsdplint.model.names import CONSTANTS, dotted_name
from fsdplint.model.ranks import reads_rank
from fsdplint.model.syntax import bound_names, literal_default, number_literal
from fsdplint.model.conditions import GROUP_STARTED
from fsdplint.model.values import RANK_NUMBER, Value

if TYPE_CHECKING:
    from fsdplint.model.files import FileModel, FunctionInfo
    from fsdplint.model.program import Program

_PLAIN_BASES = frozenset({"torch.nn.Module", "object"})
_ABSTRACT_BASE = "abc.ABC"  # sets no attribute either; read past only where bases are read through packages (cost)
_DATACLASS = "dataclasses.dataclass"
_NOT_FIELDS = frozenset({"typing.ClassVar", "dataclasses.KW_ONLY"})  # class attributes, the keyword-only marker
_INIT_ONLY = "dataclasses.InitVar"  # a parameter of `__init__` the object does not keep


@dataclass(frozen=True)
class Constructor:
    """What a construction's arguments are matched to: the parameters after `self`, in order, and
    those whose default is a literal (`"None"`, `"True"`, `"-1"`), with it."""

    params: Sequence[str]
    literal_defaults: Mapping[str, str]


@dataclass(frozen=True)
class Stored:
    """What an attribute holds after construction: the constructor's parameter `parameter` (its value
    at the call), the literal `literal`, a value computed from the rank (`varies_with_rank`), or an
    object a call built (`built_by`)."""

    parameter: str | None = None
    literal: str | None = None
    varies_with_rank: bool = False
    group_started: bool = False  # `self.is_distributed = dist.is_initialized()`: the same test wherever read
    # The class (or function) a call in the constructor built the object by (`self.policy = Policy(...)`):
    # which object it is differs between objects, its class does not.
    built_by: str | None = None

    def value(self) -> Value | None:
        """What it holds in any object of the class: a literal, or a number that differs between ranks."""
        if self.literal is not None:
            return Value(constant=self.literal)
        if self.group_started:
            return Value(run_test=True, formula=GROUP_STARTED)
        return Value(rank_derived=RANK_NUMBER) if self.varies_with_rank else None


def stored_attributes(program: Program, file: FileModel, qualname: str, every_object: bool = False,
                      objects: bool = False, through_packages: bool = False) -> tuple[Constructor | None, dict[str, Stored]]:
    """The class's constructor, and the attributes an object of the class holds when it returns, from
    the constructor's parameters, literals or the rank (see the module's docstring); with
    `every_object`, those that hold whatever the call gave (no parameter's); with `objects`, also those
    a call built (`Stored.built_by`); with `through_packages`, reading a base a package re-exports too
    (deepmd-kit's `AbstractTrainer`). The last two for the tests of properties and of guard clauses
    only: keeping more attributes, and walking more bases, for every construction would cost. Cached
    per class."""
    key = (id(file), qualname, every_object, objects, through_packages)
    known = program.constructor_attributes.get(key)
    if known is None:
        init = program.method_of_class(file, qualname, "__init__")
        if init is not None:
            stores = _constructor_stores(program, init, depth=0)
            constructor = Constructor(init.params[1:], {name: default for name in init.params[1:] if (default := literal_default(init.node, name)) is not None})
        else:
            constructor, stores = _generated_by_dataclass(program, file, qualname)
        if not objects:
            stores = ({attribute: held for attribute, held in stores[0].items() if held.built_by is None}, stores[1])
        known = program.constructor_attributes[key] = (constructor, _stored(program, file, qualname, stores, every_object, through_packages) if constructor else {})
    return known


def attributes_of_every_object(program: Program, file: FileModel, qualname: str) -> dict[str, Value]:
    """What every object of the class holds in its attributes once built, whatever the call gave:
    the literals and the values computed from the rank its constructor stores."""
    stored = stored_attributes(program, file, qualname, every_object=True)[1]
    return {attribute: value for attribute, held in stored.items() if (value := held.value()) is not None}


def attribute_built_by(program: Program, file: FileModel, qualname: str, attribute: str) -> str | None:
    """The class (or function) by which the constructor of every object of the class builds what it
    keeps in `attribute` (`Policy` of `self.sharding = Policy(stage=...)`), as written there."""
    init = program.method_of_class(file, qualname, "__init__")
    written = _constructor_stores(program, init, depth=0)[0].get(attribute) if init is not None else None
    if written is None or written.built_by is None:
        return None  # the constructor builds nothing there: no need to read the class and its bases
    held = stored_attributes(program, file, qualname, every_object=True, objects=True, through_packages=True)[1].get(attribute)
    return held.built_by if held is not None else None


def _kept_at(program: Program, file: FileModel, qualname: str, call: cst.Call, args: tuple[Value, ...],
             kwargs: Mapping[str, Value]) -> Iterator[tuple[str, Value | None, bool]]:
    """Each attribute `stored_attributes` knows, with what the object `call` constructs holds there and
    whether that is an argument of the call: what every object holds, the argument the call gives the
    parameter it keeps, or that parameter's literal default; None for a default that is no literal.
    Nothing where the call spreads `*args` or `**kwargs`."""
    constructor, stored = stored_attributes(program, file, qualname)
    if not stored or any(arg.star for arg in call.args):
        return
    given = dict(zip(constructor.params, args)) | kwargs
    for attribute, held in stored.items():
        if (value := held.value()) is not None:
            yield attribute, value, False
        elif held.parameter in given:
            yield attribute, given[held.parameter], True
        elif (default := constructor.literal_defaults.get(held.parameter)) is not None:
            yield attribute, Value(constant=default), False
        elif held.parameter is not None:
            yield attribute, None, False


def attributes_at(program: Program, file: FileModel, qualname: str, call: cst.Call, args: tuple[Value, ...],
                  kwargs: Mapping[str, Value]) -> dict[str, Value]:
    """What the object `call` constructs holds in its attributes: those of every object, and a parameter
    stored that the call gives a literal or an object of the caller (the same object), or leaves to
    its literal default. Nothing where the call spreads `*args` or `**kwargs`."""
    known = {}
    for attribute, value, argument in _kept_at(program, file, qualname, call, args, kwargs):
        if value is not None and not argument:
            known[attribute] = value
        elif value is not None and value.constant is not None:
            known[attribute] = Value(constant=value.constant)
        elif value is not None and value.ref is not None:
            known[attribute] = value  # the object the call gave: the caller's `model` in `Trainer(model)`
    return known


class Holds(enum.Enum):
    """Whether what an object's attribute holds, kept from its construction, may hold parameters."""

    NO_PARAMETERS = "no parameters"  # a literal (a number, a string, a flag, None) or a number read from the rank
    MODULE = "a module"  # a module or a parameter that a call of torch.nn builds in the argument
    UNKNOWN = "unknown"  # any other argument (`args.num_masks`, an object of the caller's), or a default no literal


def holdings_at(program: Program, file: FileModel, qualname: str, call: cst.Call, args: tuple[Value, ...],
                kwargs: Mapping[str, Value]) -> dict[str, Holds]:
    """What each attribute `stored_attributes` knows holds in the object `call` constructs (`_kept_at`):
    whether it may hold parameters."""
    found = {}
    for attribute, value, argument in _kept_at(program, file, qualname, call, args, kwargs):
        made = value.event.qname if value is not None and value.event is not None and value.ref is None else None
        found[attribute] = Holds.UNKNOWN if value is None else \
            Holds.NO_PARAMETERS if not argument or value.constant is not None else \
            Holds.MODULE if made and made.startswith("torch.nn.") and made.rsplit(".", 1)[-1][:1].isupper() else Holds.UNKNOWN
    return found


def kept_by_base_constructor(program: Program, init: FunctionInfo, call: cst.Call, args: tuple[Value, ...],
                             kwargs: Mapping[str, Value]) -> dict[str, Value]:
    """What the base class's constructor that `init` calls (`super().__init__(model, opt)`,
    `Base.__init__(self, model)`) keeps of the arguments `call` gives it, as `stored_attributes` knows
    them: each attribute, with the value of the argument it keeps (SimonYRSK/G2E's `self.model`)."""
    base = _base_constructor(program, init, call)
    if base is None or base.owner is None or any(arg.star for arg in call.args):
        return {}
    constructor, stored = stored_attributes(program, base.file, base.owner)
    if constructor is None:
        return {}
    explicit_self = type(call.func.value) is not cst.Call  # `Base.__init__(self, ...)`: `self` is its first argument
    given = dict(zip(constructor.params, args[1:] if explicit_self else args)) | dict(kwargs)
    return {attribute: given[held.parameter] for attribute, held in stored.items() if held.parameter in given}


# Callees given `self` that assign none of its attributes: a base's constructor through `super`, and
# builtins that only read the object.
_KEEP_SELF_TO_THEMSELVES = frozenset({"super"}) | distributed.READ_ONLY_BUILTINS


def _stored(program: Program, file: FileModel, qualname: str, stores: tuple[dict[str, Stored], set[int]], every_object: bool,
            through_packages: bool) -> dict[str, Stored]:
    stored, counted = stores
    if every_object:
        stored = {attribute: held for attribute, held in stored.items() if held.parameter is None}
    if not stored:
        return {}  # before the walk of the class's code below, which is most of the cost
    lineage = list(program.class_lineage(file, qualname, through_packages))
    plain = _PLAIN_BASES | {_ABSTRACT_BASE} if through_packages else _PLAIN_BASES
    if any(not isinstance(entry, tuple) and entry not in plain for entry in lineage):
        return {}
    # Assigned anywhere else in the lineage (another method, a nested statement of a constructor), or
    # `self` handed to a function other than a base's constructor: not known.
    for class_file, class_name in (entry for entry in lineage if isinstance(entry, tuple)):
        pending: list[cst.CSTNode] = [class_file.classes[class_name]]
        while pending and stored:
            node = pending.pop()
            pending.extend(node.children)
            if id(node) in counted:
                continue
            if type(node) is cst.Call and not (type(node.func) is cst.Name and node.func.value in _KEEP_SELF_TO_THEMSELVES
                                               and node.func.value not in class_file.imports) \
                    and any(type(arg.value) is cst.Name and arg.value.value == "self" for arg in node.args):
                return {}
            for attribute in _self_attributes_assigned(node):
                stored.pop(attribute, None)
    return stored


def _generated_by_dataclass(program: Program, file: FileModel, qualname: str) -> tuple[Constructor | None, tuple[dict[str, Stored], set[int]]]:
    """The `__init__` `@dataclass` generates for the class, and what it stores: each field, the
    parameter of its name. None for a class that is not a dataclass, asks for no `__init__`
    (`init=False`), or derives from a class of the run (whose fields would come first)."""
    node = file.classes[qualname]
    decorators = [decorator.decorator for decorator in node.decorators]
    generates = [decorator for decorator in decorators if file.qualify(decorator.func if type(decorator) is cst.Call else decorator) == _DATACLASS]
    if len(generates) != 1 or type(generates[0]) is cst.Call and any(
            arg.keyword is not None and arg.keyword.value == "init" and type(arg.value) is cst.Name and arg.value.value == "False" for arg in generates[0].args):
        return None, ({}, set())
    if any(isinstance(entry, tuple) for entry in list(program.class_lineage(file, qualname))[1:]):
        return None, ({}, set())
    params: list[str] = []
    defaults: dict[str, str] = {}
    stored: dict[str, Stored] = {}
    for statement in node.body.body if type(node.body) is cst.IndentedBlock else ():
        for small in statement.body if type(statement) is cst.SimpleStatementLine else ():
            if type(small) is not cst.AnnAssign or type(small.target) is not cst.Name:
                continue
            annotation = small.annotation.annotation
            kind = file.qualify(annotation.value if type(annotation) is cst.Subscript else annotation)
            if kind in _NOT_FIELDS:
                continue
            if type(small.value) is cst.Call and file.qualify(small.value.func) == "dataclasses.field":
                if any(arg.keyword is not None and arg.keyword.value == "init" for arg in small.value.args):
                    return None, ({}, set())  # `field(init=...)`: which parameters there are is not read here
            name = small.target.value
            params.append(name)
            default = small.value.value if type(small.value) is cst.Name and small.value.value in CONSTANTS else number_literal(small.value)
            if default is not None:
                defaults[name] = default
            if kind != _INIT_ONLY:
                stored[name] = Stored(parameter=name)
    return Constructor(params, defaults), (stored, set())


def _constructor_stores(program: Program, init: FunctionInfo, depth: int) -> tuple[dict[str, Stored], set[int]]:
    """The attributes the constructor's top-level statements store, in order (a later one wins), with
    the ids of the statements read (every other assignment to an attribute of `self` is not known)."""
    stored: dict[str, Stored] = {}
    counted: set[int] = set()
    statements = init.node.body.body if type(init.node.body) is cst.IndentedBlock else ()
    # A parameter the constructor rebinds holds something else by then (G2E's `model = FSDP(model, ...)`
    # before `super().__init__(model, ...)`): not the argument the call gave.
    rebound = set(bound_names(statements))
    params = [name for name in init.params[1:] if name not in rebound]
    for statement in statements:
        if type(statement) is not cst.SimpleStatementLine:
            continue
        for small in statement.body:
            if type(small) is cst.Assign and len(small.targets) == 1 and (attribute := _self_attribute(small.targets[0].target)):
                counted.add(id(small))
                _store(stored, attribute, _held(small.value, params, init.file))
            elif type(small) is cst.Expr and type(small.value) is cst.Call and depth < 4 \
                    and (base := _base_constructor(program, init, small.value)) is not None:
                inherited, base_counted = _constructor_stores(program, base, depth + 1)
                counted |= base_counted | {id(small.value)}
                for attribute, held in _passed(inherited, base, small.value, params, init.file).items():
                    _store(stored, attribute, held)
    return stored, counted


def _store(stored: dict[str, Stored], attribute: str, held: Stored | None) -> None:
    """The attribute now holds `held`; where that is not known (None), nothing is known of it."""
    if held is None:
        stored.pop(attribute, None)
    else:
        stored[attribute] = held


def _held(value: cst.CSTNode, params: list[str], file: FileModel) -> Stored | None:
    """What an attribute assigned `value` (written in `file`) holds: a parameter, a literal, whether the
    process is in a process group, a call's object, or None (not known)."""
    if type(value) is cst.Name and value.value in params:
        return Stored(parameter=value.value)
    if type(value) is cst.Name and value.value in CONSTANTS or type(value) is cst.Integer:
        return Stored(literal=value.value)
    if type(value) is cst.BinaryOperation and reads_rank(value):
        return Stored(varies_with_rank=True)  # `self._local_rank % local_shard_num` (the rank itself is one by its name)
    if type(value) is cst.Call and file.qualify(value.func) in distributed.PROCESS_GROUP_QUERIES:
        return Stored(group_started=True)
    if type(value) is cst.Call and (name := dotted_name(value.func)) is not None:
        return Stored(built_by=name)
    return None


def _passed(inherited: dict[str, Stored], base: FunctionInfo, call: cst.Call, params: list[str], file: FileModel) -> dict[str, Stored | None]:
    """What the base constructor stores, in terms of the calling constructor's parameters (None: not known)."""
    if any(arg.star for arg in call.args):
        return dict.fromkeys(inherited)
    explicit_self = type(call.func.value) is not cst.Call  # `Base.__init__(self, ...)`, not `super().__init__(...)`
    positional = [arg.value for arg in call.args if arg.keyword is None][1 if explicit_self else 0:]
    given = dict(zip(base.params[1:], positional)) | {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
    mapped: dict[str, Stored | None] = {}
    for attribute, held in inherited.items():
        if held.parameter is None:
            mapped[attribute] = held
        elif held.parameter in given:
            mapped[attribute] = _held(given[held.parameter], params, file)
        else:
            default = literal_default(base.node, held.parameter)
            mapped[attribute] = None if default is None else Stored(literal=default)
    return mapped


def _base_constructor(program: Program, init: FunctionInfo, call: cst.Call) -> FunctionInfo | None:
    """The base class's `__init__` that `super().__init__(...)`, `super(C, self).__init__(...)` or
    `Base.__init__(self, ...)` calls, when it is a class of the run's."""
    func = call.func
    if type(func) is not cst.Attribute or func.attr.value != "__init__" or init.class_name is None:
        return None
    lineage = list(program.class_lineage(init.file, init.owner))[1:]  # by its qualified name: a class in a method too
    if type(func.value) is cst.Call and type(func.value.func) is cst.Name and func.value.func.value == "super":
        for entry in lineage:
            if isinstance(entry, tuple) and f"{entry[1]}.__init__" in entry[0].functions:
                return entry[0].functions[f"{entry[1]}.__init__"]
        return None
    found = program.class_of(init.file, func.value)
    return program.method_of_class(*found, "__init__") if found is not None else None


def _self_attribute(target: cst.CSTNode) -> str | None:
    if type(target) is cst.Attribute and type(target.value) is cst.Name and target.value.value == "self":
        return target.attr.value
    return None


def _self_attributes_assigned(node: cst.CSTNode) -> list[str]:
    """The attributes of `self` this node assigns (`=`, `+=`, an annotated assignment, a tuple of
    targets, `del`)."""
    if type(node) is cst.Assign:
        targets = [target.target for target in node.targets]
    elif type(node) in (cst.AugAssign, cst.AnnAssign):
        targets = [node.target]
    elif type(node) is cst.Del:
        targets = [node.target]
    else:
        return []
    parts = [part for target in targets for part in ([element.value for element in target.elements] if type(target) in (cst.Tuple, cst.List) else [target])]
    return [attribute for part in parts if (attribute := _self_attribute(part)) is not None]
