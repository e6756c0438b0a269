"""Where a module's parameters are built: on the default device (the CPU, unless the program sets
another), as far as the program shows. Torch knowledge the model's facts are read with (FSDP405)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import libcst as cst

from fsdplint import distributed
from fsdplint.model.events import ASSIGN, CALL, CALL_VALUE, ENTER, METHOD, Event
from fsdplint.model.names import BUILTINS

if TYPE_CHECKING:
    from fsdplint.model.files import FileModel, FunctionInfo
    from fsdplint.model.program import Program


def builds_on_default_device(program: Program, event: Event) -> bool:
    """The call `event` builds a module whose parameters and buffers stay on the default device (the
    CPU, unless the program sets another): a `torch.nn` module class given no device (a container
    only of such modules, built in its arguments), or a class of this run whose bases are such
    classes and whose `__init__` (with the functions it calls) builds only such modules and plain
    tensors, names no device and moves nothing; and the statement that holds the call moves nothing
    (`nn.Linear(4, 4).cuda()`). False when not known (a library's class, `**kwargs`, a layer class
    passed in as a value)."""
    statement = event.statement if type(event.statement) is cst.SimpleStatementLine else event.node
    if type(event.node) is not cst.Call or _places_anywhere(statement):
        return False
    return _builds_on_default_device(program, event, set())

def _builds_on_default_device(program: Program, event: Event, seen: set[int]) -> bool:
    if event.kind == CALL and event.qname and distributed.is_torch_name(event.qname):
        if not _is_torch_module_class(event.qname):
            return False
        if event.qname.rsplit(".", 1)[-1] not in _TORCH_CONTAINERS:
            return True
        # `nn.Sequential(nn.Linear(...), Block())`: each module it is given, built right there.
        given = [element for value in (*event.args, *event.kwargs.values()) for element in (value.elements if value.elements is not None else (value,))]
        return all(value.event is not None and value.ref is None and _builds_on_default_device(program, value.event, seen) for value in given)
    found = program.class_of(event.file, event.node.func) if event.kind in (CALL, CALL_VALUE) else None
    return found is not None and _class_on_default_device(program, *found, seen)

def _class_on_default_device(program: Program, file: FileModel, qualname: str, seen: set[int]) -> bool:
    node = file.classes[qualname]
    if id(node) in seen:
        return True  # a class built inside itself: decided where it was first met
    seen.add(id(node))
    if not node.bases or node.keywords:
        return False
    for base in node.bases:
        qualified = file.qualify(base.value)
        if qualified and distributed.is_torch_name(qualified):
            if not _is_torch_module_class(qualified):
                return False
            continue
        found = program.class_of(file, base.value)
        if found is None or not _class_on_default_device(program, *found, seen):
            return False
    init = file.functions.get(f"{qualname}.__init__")
    return init is None or _function_keeps_default_device(program, init, seen)

def _function_keeps_default_device(program: Program, function: FunctionInfo, seen: set[int]) -> bool:
    flow = program.flow_of(function)
    if flow is None or flow.exhausted or _places_anywhere(function.node.body):
        return False
    # The statements of the functions it calls, too: `.cuda()` on a module just built is no event.
    return all(_keeps_default_device(program, event, seen) and not _places_anywhere(event.statement) for event in flow.events)

def _keeps_default_device(program: Program, event: Event, seen: set[int]) -> bool:
    """An event of a constructor that leaves what it builds on the default device."""
    if event.kind in (ENTER, ASSIGN):
        return True  # a function of the run, whose events follow; an attribute set
    node = event.node
    if type(node) is not cst.Call or event.kind not in (CALL, CALL_VALUE, METHOD) or _names_device(node):
        return False
    if event.kind == METHOD:
        if event.method != "apply":
            return True
        # `program.apply(program._init_weights)`: the function it applies to every sub-module, if of this run.
        applied = program.resolve_callable(event.file, event.function, node.args[0].value) if len(node.args) == 1 else None
        return applied is not None and _function_keeps_default_device(program, applied, seen)
    qname = event.qname if event.kind == CALL else None
    if qname is None and event.kind == CALL:
        # `super().__init__(...)`; not a call of something the model could not name (`registry[kind](dim)`).
        func = node.func
        return type(func) is cst.Attribute and type(func.value) is cst.Call and type(func.value.func) is cst.Name and func.value.func.value == "super"
    if qname in BUILTINS:
        return True
    if qname and distributed.is_torch_name(qname):
        return qname not in _DEFAULT_DEVICE_SETTERS and not qname.startswith("torch.cuda.")
    if qname and qname.split(".")[0] in _PLAIN_MODULES:
        return True  # `math.sqrt(dim)`, `functools.partial(...)`: the standard library and numpy build no modules
    found = program.class_of(event.file, node.func)
    return found is not None and _class_on_default_device(program, *found, seen)


# Calls that change the device modules are built on (`torch.device(...)` as a context manager too).
_DEFAULT_DEVICE_SETTERS = distributed.DEFAULT_DEVICE_SETTERS | {"torch.device"}
# Keywords that place what a call builds.
_PLACING_KEYWORDS = frozenset({"device", "device_id", "device_map", "device_ids"})
# Modules whose calls build no torch module: the standard library's and numpy.
_PLAIN_MODULES = frozenset(sys.stdlib_module_names) | {"numpy", "np"}


def _is_torch_module_class(qualified: str) -> bool:
    """`torch.nn.Linear`, `torch.nn.modules.linear.Linear`: a module class of `torch.nn` (not a function
    such as `torch.nn.functional.relu` or `torch.nn.init.normal_`)."""
    return qualified.startswith("torch.nn.") and qualified.rsplit(".", 1)[-1][:1].isupper() and ".functional." not in qualified


_TORCH_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})


def _places_anywhere(node: cst.CSTNode) -> bool:
    """Some call in `node` names a device or moves what it is called on (`_names_device`)."""
    pending = [node]
    while pending:
        node = pending.pop()
        if type(node) is cst.Call and _names_device(node):
            return True
        pending.extend(node.children)
    return False


def _names_device(call: cst.Call) -> bool:
    """The call names a device or moves to one: `device=`/`device_map=`, `.to(...)`, `.cuda()`, `**kwargs`
    (which may hold `device=`)."""
    if any(arg.star == "**" or arg.keyword is not None and arg.keyword.value in _PLACING_KEYWORDS for arg in call.args):
        return True
    return type(call.func) is cst.Attribute and call.func.attr.value in distributed.MODULE_MOVES
