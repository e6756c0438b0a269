"""Whether a module holds blocks to shard one by one, read from how it was built: torch knowledge
beside the model, as `ranks` and `devices` are.

A module holds none when it is a single layer (`torch.nn.Linear`; Transformer Engine's fused layers),
an `nn.Sequential` of such layers written out in the call, or an instance of a class of the run
derived from `nn.Module` alone whose `__init__` calls nothing but such layers, torch's functions,
a few builtins and its own static methods, besides what it makes its parameters of (`nn.Parameter(init.clone())`)
(the two-Linear models of tests and demos). Anything else,
what a call or a class the model cannot read builds included, may hold some.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import libcst as cst

from fsdplint import distributed
from fsdplint.model.events import CALL, CALL_VALUE, METHOD, SHARD, WRAP
from fsdplint.model.names import dotted_name
from fsdplint.model.syntax import nodes_under
from fsdplint.model.values import Ref

if TYPE_CHECKING:
    from fsdplint.model.events import Event
    from fsdplint.model.files import FileModel, FunctionInfo
    from fsdplint.model.flow import Flow
    from fsdplint.model.program import Program

# torch.nn's modules that hold other modules.
_TORCH_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict", "Transformer", "TransformerEncoder", "TransformerDecoder"})
# Single layers of other libraries, which hold no blocks to shard first (Transformer Engine's fused
# layers; its TransformerLayer is a block of its own and not here).
_LIBRARY_LAYERS = frozenset({f"transformer_engine.pytorch.{name}" for name in ("Linear", "LayerNormLinear", "LayerNorm", "RMSNorm", "LayerNormMLP", "GroupedLinear")})
# Module methods whose result is the module itself (`model = model.to(device)` keeps its identity; `Net().to(device)` is what `Net()` built).
RETURNS_SELF = frozenset({"to", "cuda", "cpu", "to_empty", "train", "eval", "float", "half", "bfloat16", "requires_grad_", "apply"})
# torch functions whose result is the module they are given, changed in place (`convert_sync_batchnorm`
# swaps the batch norms inside it; only a batch norm given alone comes back as a new module).
RETURNS_MODULE_GIVEN = frozenset({"torch.nn.SyncBatchNorm.convert_sync_batchnorm", "torch.nn.modules.batchnorm.SyncBatchNorm.convert_sync_batchnorm"})
# Parameters and buffers an `__init__` may make and register without building a module
# (nvidia-resiliency-ext's test model: `self.register_parameter(name, nn.Parameter(...))` only).
_PARAMETER_CLASSES = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer", "torch.nn.parameter.Buffer"})
_REGISTERS_TENSORS = frozenset({"self.register_parameter", "self.register_buffer"})
# Builtins an `__init__` may call without building a module.
_PLAIN_BUILTINS = frozenset({"int", "float", "bool", "str", "len", "max", "min", "range", "round", "abs", "isinstance", "tuple", "list", "print"})


def is_layer(qualified: str | None) -> bool:
    """A single layer of torch.nn or of a library that holds no other module."""
    return bool(qualified) and (qualified.startswith("torch.nn.") and qualified.rsplit(".", 1)[-1] not in _TORCH_CONTAINERS
                                or qualified in _LIBRARY_LAYERS)


def holds_no_blocks(flow: Flow, ref: Ref, before: int) -> bool:
    """The module `ref` names (a variable, not a part of one) is known to hold no block of layers."""
    if ref.path:
        return False
    if is_layer(flow.constructor(ref.root, before)):
        return True
    for call, event in _calls_bound(flow, Ref(ref.root), before):
        file = event.file
        qualified = file.qualify(call.func)
        if qualified in distributed.COPIES and call is event.node and event.args and event.args[0].ref:
            return holds_no_blocks(flow, event.args[0].ref, event.index)  # a copy holds what the original holds
        if qualified == "torch.nn.Sequential":
            return _sequence_of_layers(file, call)
        if is_layer(qualified):
            return True
        found = flow.program.class_of(file, call.func)
        if found is not None:
            return _builds_only_layers(flow.program, *found)
        # Else a function that returned it (`get_model(...)`): what it built is bound to the same variable earlier.
    return False


def _sequence_of_layers(file: FileModel, call: cst.Call) -> bool:
    """`nn.Sequential(nn.Linear(...), nn.ReLU(), ...)`: single layers written out, one by one."""
    return bool(call.args) and all(arg.keyword is None and not arg.star and type(arg.value) is cst.Call and is_layer(file.qualify(arg.value.func))
                                   for arg in call.args)


def _calls_bound(flow: Flow, variable: Ref, before: int) -> Iterator[tuple[cst.Call, Event]]:
    """The calls whose result was bound to `variable` before event `before`, last first, each with the
    event bound: `Net()` for `model = Net().to(device)`; `model = model.to(device)` names none."""
    for event in reversed(flow.events[:before]):
        if event.binding != variable:
            continue
        if event.kind in (SHARD, WRAP) and event.args and event.args[0].event is not None:
            event = event.args[0].event  # `model = FSDP(Net())`: the call that built what it wrapped
        if event.kind not in (CALL, CALL_VALUE, METHOD) or type(event.node) is not cst.Call:
            continue
        call = event.node
        while type(call.func) is cst.Attribute and call.func.attr.value in RETURNS_SELF and type(call.func.value) is cst.Call:
            call = call.func.value
        if not (type(call.func) is cst.Attribute and call.func.attr.value in RETURNS_SELF):
            yield call, event


def _builds_only_layers(program: Program, file: FileModel, qualname: str, layers: bool = True) -> bool:
    """The class derives from `nn.Module` through classes of the run alone (TrainRL's `ValueHead` of
    its `ModelHeadInterface`), and the `__init__` each of them defines calls nothing that could build
    a module other than a single layer, or a leaf class of the run (d9d's test model of two modules
    that each hold one `nn.Parameter`); with `layers` False, nothing that could build a module at all:
    the class is such a leaf, a layer of its own."""
    *classes, last = program.class_lineage(file, qualname)
    if last != "torch.nn.Module" or not all(isinstance(entry, tuple) for entry in classes):
        return False
    # A class without one builds what its base's builds; with none at all, what it holds is set
    # where the model does not look.
    inits = [init for class_file, name in classes if (init := class_file.functions.get(f"{name}.__init__")) is not None]
    return bool(inits) and all(_init_builds_only_layers(program, init, layers) for init in inits)


def _init_builds_only_layers(program: Program, init: FunctionInfo, layers: bool) -> bool:
    file, qualname = init.file, init.owner
    calls = list(nodes_under(init.node.body, cst.Call))
    # What a parameter is made of is a tensor (`nn.Parameter(init.clone())`): a call inside registers no
    # module, unless it is handed the object being built (`self.make(...)`, `build(self)`).
    tensors = {id(inner) for call in calls if file.qualify(call.func) in _PARAMETER_CLASSES
               for arg in call.args for inner in nodes_under(arg.value, cst.Call) if not _reaches_self(inner)}
    for call in calls:
        if id(call) in tensors:
            continue
        func = call.func
        if type(func) is cst.Name and func.value == "super" or type(func) is cst.Attribute and func.attr.value == "__init__" \
                and type(func.value) is cst.Call and dotted_name(func.value.func) == "super":
            continue
        qualified = file.qualify(func)
        if layers and qualified == "torch.nn.Sequential" and _sequence_of_layers(file, call):
            continue  # `self.layers = nn.Sequential(nn.Linear(...), nn.ReLU(), ...)`: layers, each checked here too
        if qualified is not None and (layers and is_layer(qualified) or qualified in _PARAMETER_CLASSES
                                      or qualified.startswith("torch.") and not qualified.startswith("torch.nn.")):
            continue
        name = dotted_name(func) or ""
        if qualified is None and (name in _PLAIN_BUILTINS or name in _REGISTERS_TENSORS):
            continue
        own = file.functions.get(f"{qualname}.{name[len('self.'):]}") if qualified is None and name.startswith("self.") else None
        if own is not None and own.decorated_by("staticmethod"):
            continue
        if not (layers and (leaf := program.class_of(file, func)) is not None and _builds_only_layers(program, *leaf, layers=False)):
            return False
    return True


def _reaches_self(call: cst.Call) -> bool:
    """The call is a method of `self` or is given `self`: it may register a module on it."""
    return (dotted_name(call.func) or "").split(".")[0] == "self" or any(type(arg.value) is cst.Name and arg.value.value == "self" for arg in call.args)
