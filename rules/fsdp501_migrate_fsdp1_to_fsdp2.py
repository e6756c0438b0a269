from __future__ import annotations

import io
import re
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from fsdplint.distributed import (
    FSDP1_KEYWORDS_INSTEAD,
    FSDP1_PERFORMANCE_ONLY,
    FSDP1_STRATEGIES,
)
from fsdplint.rule import Finding, FixAvailability, Rule, Severity

if TYPE_CHECKING:
    from fsdplint.model import Event, Flow

# FSDP1 names a migrated file no longer needs once nothing uses them.
_FSDP1_NAMES = frozenset({
    "FullyShardedDataParallel", "ShardingStrategy", "MixedPrecision", "CPUOffload", "BackwardPrefetch", "StateDictType",
    "FullStateDictConfig", "FullOptimStateDictConfig", "ShardedStateDictConfig", "ModuleWrapPolicy",
    "transformer_auto_wrap_policy", "size_based_auto_wrap_policy",
})
# FSDP1's static API and its FSDP2 counterpart, for the calls the migration leaves to a person.
_FSDP2_INSTEAD = (
    (("state_dict_type", "set_state_dict_type"), "`get_model_state_dict`/`set_model_state_dict` with `StateDictOptions`"),
    (("optim_state_dict", "optim_state_dict_to_load", "full_optim_state_dict", "sharded_optim_state_dict",
      "shard_full_optim_state_dict", "scatter_full_optim_state_dict"), "`get_optimizer_state_dict`/`set_optimizer_state_dict`"),
    (("summon_full_params",), "`DTensor.full_tensor()` on the parameters"),
    (("clip_grad_norm_",), "`torch.nn.utils.clip_grad_norm_(model.parameters(), ...)`"),
    (("fsdp_modules",), "the modules that are `FSDPModule` instances"),
)
_FSDP_SUBMODULES = re.compile(r"^torch\.distributed\.fsdp\.(?:api\.|wrap\.|fully_sharded_data_parallel\.)?")
_STATE_DICT_OPTIONS = "torch.distributed.checkpoint.state_dict"


class MigrateFsdp1ToFsdp2(Rule):
    """
    ## What it does
    Rewrites FSDP1's `FullyShardedDataParallel(model, ...)` (often imported as `FSDP`) into FSDP2's
    `fully_shard`, together with the uses of the wrapped model in the same file that FSDP2 spells
    differently. Opt-in: it runs only when selected by its code, e.g.
    `fsdplint --select FSDP501 --fix --unsafe-fixes path/`, or with `fsdplint migrate path/` (which
    shows the diff, and writes it with `--write`).

    | FSDP1 | FSDP2 |
    | --- | --- |
    | `auto_wrap_policy=ModuleWrapPolicy({Block})`, `partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})` | `fully_shard` on every `Block` of `model.modules()`, then on the root |
    | `sharding_strategy=FULL_SHARD` / `SHARD_GRAD_OP` | the default `reshard_after_forward` (blocks reshard, the root does not, as in FSDP1) / `reshard_after_forward=False` |
    | `sharding_strategy=HYBRID_SHARD, device_mesh=mesh` | `mesh=mesh` (2-D: replicate, shard) |
    | `mixed_precision=MixedPrecision(param_dtype=..., reduce_dtype=...)` | `mp_policy=MixedPrecisionPolicy(...)` |
    | `cpu_offload=CPUOffload(offload_params=True)` | `offload_policy=CPUOffloadPolicy()` |
    | `device_id=d` | `mesh=init_device_mesh(torch.device(d).type, (world_size,))` |
    | `device_mesh=mesh` | `mesh=mesh` |
    | `sync_module_states=True` | rank 0's state dict broadcast after sharding with `set_model_state_dict(..., broadcast_from_rank0=True)` |
    | `ignored_modules=mods` | `ignored_params={p for m in mods for p in m.parameters()}` |
    | `use_orig_params`, `limit_all_gathers`, `forward_prefetch`, `backward_prefetch` | dropped (speed and memory only) |
    | `isinstance(model, FullyShardedDataParallel)` | `isinstance(model, FSDPModule)` |
    | `with model.no_sync():` | `set_requires_gradient_sync(False)` … `finally: set_requires_gradient_sync(True)` |
    | `model.clip_grad_norm_(x)` | `torch.nn.utils.clip_grad_norm_(model.parameters(), x)` |
    | `model.state_dict()` / `model.load_state_dict(sd)` (FSDP1's default full state dict) | `get_model_state_dict` / `set_model_state_dict` with `full_state_dict=True` |
    | `with FSDP.state_dict_type(model, FULL_STATE_DICT, FullStateDictConfig(offload_to_cpu=o, rank0_only=o)):` + `model.state_dict()` | `get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=o))` |
    | `FSDP.optim_state_dict(model, optimizer)` under that `with` | `get_optimizer_state_dict(model, optimizer, options=...)` |

    Whatever has no faithful mapping is left unchanged and reported with what to do by hand: a
    custom or size-based wrap policy, `HYBRID_SHARD` without a mesh, `NO_SHARD`, `param_init_fn`,
    `process_group`, `**kwargs`, MixedPrecision or policy objects built in another file, other
    FSDP1 APIs (`summon_full_params`, `LOCAL_STATE_DICT`, ...), FSDP1's wrapper attribute
    `model.module`, or uses of the model in another file. A wrap is migrated together with all its
    uses or not at all; when the model is returned to callers or handed to functions outside the
    checked files, the finding says so. `FSDP.state_dict_type(model, ...)` and the like on a model
    wrapped elsewhere (a checkpoint helper taking the model as a parameter) are reported too. Once
    a file has no FSDP1 wrap left, the FSDP1 imports it no longer uses are removed.

    ## Why is this bad?
    FSDP1 is deprecated in favour of FSDP2 (`fully_shard`): per-parameter DTensor sharding, no
    flat parameters, simpler state dicts and composition with tensor parallelism. Migrating by hand
    is error-prone: every FSDP1 argument has a different FSDP2 spelling, and a single forgotten
    `no_sync` or `clip_grad_norm_` fails at run time on the cluster.

    ## Example
    ```python
    model = FSDP(
        model,
        auto_wrap_policy=ModuleWrapPolicy({Block}),
        mixed_precision=MixedPrecision(param_dtype=torch.bfloat16),
        device_id=device,
    )
    ```

    ## Use instead
    ```python
    mesh = init_device_mesh(torch.device(device).type, (dist.get_world_size(),))
    for module in model.modules():
        if isinstance(module, Block):
            fully_shard(module, mesh=mesh, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
    model = fully_shard(model, mesh=mesh, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
    ```

    ## Fix safety
    Unsafe: it rewrites several statements, and the program it makes is FSDP2 code with different
    state-dict keys and parameter types (DTensor). Each migrated fixture is run against its FSDP1
    original by `fsdplint verify` and must give the same losses. `MixedPrecision(buffer_dtype=...)`
    has no FSDP2 equivalent: it is dropped and the finding says so (buffers keep their dtype).
    Block classes nested in each other are sharded parent first, which FSDP2 rejects at run time.

    ## References
    - [FSDP2 tutorial: migrating from FSDP1](https://pytorch.org/tutorials/intermediate/FSDP_tutorial.html)
    - [fully_shard](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
    - [Distributed state dict](https://pytorch.org/docs/stable/distributed.checkpoint.html)
    """

    code = "FSDP501"
    name = "migrate-fsdp1-to-fsdp2"
    summary = "FSDP1 `FullyShardedDataParallel` can be migrated to FSDP2 `fully_shard` (opt-in)"
    severity = Severity.WARNING
    fix_availability = FixAvailability.UNSAFE
    opt_in = True

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.model import WRAP

        # Each entry flow that reaches a wrap sees the uses of its model on one path through the
        # callers; the wrap is migrated when every path's uses can be.
        views: dict[int, list[_Migration]] = {}
        wrapped_files = set()
        for flow in program.flows:
            for event in flow.of_kind(WRAP):
                wrapped_files.add(id(event.file))
                if flow.is_entry:
                    views.setdefault(id(event.node), []).append(_Migration(flow, event))
        for migrations in views.values():
            yield _finding(migrations)
        yield from _fsdp1_api_on_models_wrapped_elsewhere(program)
        for file in program.files:
            if id(file) not in wrapped_files:
                yield from _unused_fsdp1_imports(file)


@dataclass
class _Migration:
    """One FSDP1 wrap and the uses of its model: the FSDP2 code for them, or what stops it."""

    flow: Flow
    event: Event
    module: str = ""  # the code naming the module to shard
    keywords: list[str] = field(default_factory=list)  # `name=code` for every fully_shard call
    block_classes: list[str] = field(default_factory=list)
    before: list[str] = field(default_factory=list)  # statements before the wrap's statement
    after: list[str] = field(default_factory=list)
    operations: list = field(default_factory=list)
    imports: dict[str, set[str]] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    manual: list[str] = field(default_factory=list)  # what a person must do: no fix when any

    def code(self, node) -> str:
        return self.event.file.code(node).strip()

    def quote(self, node) -> str:
        """`node`'s code on one line, for a message."""
        return " ".join(self.code(node).split())

    def need(self, module: str, *names: str) -> None:
        self.imports.setdefault(module, set()).update(names)

    def build(self) -> _Migration:
        """Map the wrap and the uses this flow sees: operations, or what a person must do."""
        from fsdplint.fixes import AddImport

        call = self.event.node
        self.module = self.wrapped_module(call) or ""
        if not self.module or self.event.target is None:
            self.manual.append("wrap a plain variable (`model = FSDP(model, ...)`) so that `fully_shard` can shard it in place")
        else:
            self.map_arguments(call)
            self.place()
            self.map_uses()
        self.operations += [AddImport(module, tuple(sorted(names))) for module, names in sorted(self.imports.items())]
        return self

    def unseen_uses(self) -> str:
        """Where the model goes that this run cannot follow: its uses there may be FSDP1 API too."""
        target = self.event.target
        returned = self.flow.returned
        refs = [returned.ref, *(element.ref for element in returned.elements or ())]
        places = []
        if self.flow.function is not None and any(ref is not None and ref.root == target.root for ref in refs):
            places.append(f"it is returned by `{self.flow.function.name}`, whose callers are not checked")
        if self.flow.escapes(target, self.event.index):
            places.append("it is handed to functions outside the checked files")
        if not places:
            return ""
        return (f"; {' and '.join(places)}: check those uses for FSDP1 API (`no_sync`, `clip_grad_norm_`, "
                f"`state_dict_type`) and for `state_dict()`, which FSDP2 returns sharded")

    def wrapped_module(self, call) -> str | None:
        """The code naming the module to shard: FSDP's first argument, or for `model = FSDP(Model(), ...)`
        the assigned name, bound to `Model()` first."""
        import libcst as cst

        from fsdplint.model import dotted_name

        if not call.args or call.args[0].keyword is not None:
            return None
        wrapped = call.args[0].value
        if dotted_name(wrapped):
            return self.code(wrapped)
        small = self.event.statement.body[0] if isinstance(self.event.statement, cst.SimpleStatementLine) else None
        if isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
            name = small.targets[0].target.value
            self.before.append(f"{name} = {self.code(wrapped)}")
            return name
        return None

    # the wrap's arguments

    def map_arguments(self, call) -> None:
        arguments = {arg.keyword.value: arg.value for arg in call.args[1:] if arg.keyword is not None}
        if any(arg.star for arg in call.args):
            self.manual.append(f"`{next(arg.star + self.quote(arg.value) for arg in call.args if arg.star)}`: the arguments are not known here; spell them out")
        elif any(arg.keyword is None for arg in call.args[1:]):
            self.manual.append("pass FSDP's arguments by keyword")
        mesh = self.code(arguments["device_mesh"]) if "device_mesh" in arguments else None
        reshard, hybrid = self.strategy(arguments.get("sharding_strategy"))
        if hybrid and mesh is None:
            self.manual.append("HYBRID_SHARD needs a 2-D mesh: build `init_device_mesh(..., (replicas, shards), mesh_dim_names=(\"replicate\", \"shard\"))` and pass it")
        if mesh is None and "device_id" in arguments:
            mesh = self.mesh_from_device(arguments["device_id"])
        elif "device_id" in arguments:
            self.dropped.append("`device_id`: `fully_shard` uses the mesh's device")
        if mesh is not None:
            self.keywords.append(f"mesh={mesh}")
        if reshard is False:
            self.keywords.append("reshard_after_forward=False")
        for name, value in arguments.items():
            if name in ("device_mesh", "sharding_strategy", "device_id"):
                continue
            if name in FSDP1_PERFORMANCE_ONLY:
                self.dropped.append(f"`{name}`, which changes only speed or memory")
            elif name == "auto_wrap_policy":
                self.wrap_policy(value)
            elif name == "mixed_precision":
                self.mixed_precision(value)
            elif name == "cpu_offload":
                self.cpu_offload(value)
            elif name == "ignored_modules":
                self.keywords.append(f"ignored_params={{param for ignored in {self.code(value)} for param in ignored.parameters()}}")
            elif name == "sync_module_states":
                self.sync_module_states(value)
            else:
                instead = FSDP1_KEYWORDS_INSTEAD.get(name)
                self.manual.append(f"`{name}=` has no FSDP2 mapping here" + (f" ({instead})" if instead else ""))

    def strategy(self, value) -> tuple[bool | None, bool]:
        if value is None:
            return None, False
        name = _fsdp_name(self.event.file, value) or ""
        member = name.removeprefix("ShardingStrategy.")
        if member not in FSDP1_STRATEGIES:
            self.manual.append(f"`sharding_strategy={self.quote(value)}` has no FSDP2 mapping here (FULL_SHARD, SHARD_GRAD_OP and HYBRID_SHARD do; NO_SHARD is DDP: use `replicate`)")
            return None, False
        return FSDP1_STRATEGIES[member]

    def mesh_from_device(self, device) -> str | None:
        from fsdplint.rulekit import qualified_reference, unused_name

        torch = qualified_reference(self.event.file, "torch")
        dist = qualified_reference(self.event.file, "torch.distributed")
        if torch is None or dist is None:
            self.manual.append("`device_id=`: import torch and torch.distributed, or pass a mesh")
            return None
        mesh = unused_name(self.event, "mesh")
        self.before.append(f"{mesh} = init_device_mesh({torch}.device({self.code(device)}).type, ({dist}.get_world_size(),))")
        self.need("torch.distributed.device_mesh", "init_device_mesh")
        return mesh

    def constructor(self, value, tracked, *names: str, before: int | None = None):
        """The constructor call that argument `value` (tracked by the model as `tracked`) is: inline, or
        the last call bound to that variable in this flow before event `before` (default: the wrap),
        or for a global, at the module level of this file. (its call node, its event when bound, its
        name) if its name is one of `names`, else None."""
        import libcst as cst

        from fsdplint.model import CALL, Ref

        if isinstance(value, cst.Call):
            name = _fsdp_name(self.event.file, value.func) or self.event.file.qualify(value.func)
            return (value, None, name) if name in names else None
        bound = tracked.ref if tracked is not None else None
        if bound is None:
            return None
        scopes = [(self.flow.events[:self.event.index if before is None else before], bound)]
        if isinstance(value, cst.Name) and bound.root not in self.flow.assigned_roots:
            module = next(flow for flow in self.flow.program.flows if flow.function is None and flow.file is self.event.file)
            scopes.append((module.events, Ref(value.value)))
        for events, ref in scopes:
            for earlier in reversed(events):
                if earlier.kind == CALL and earlier.binding == ref and earlier.file is self.event.file:
                    found = _fsdp_name(earlier.file, earlier.node.func) or earlier.qname
                    return (earlier.node, earlier, found) if found in names else None
        return None

    def wrap_policy(self, value) -> None:
        import libcst as cst

        built = self.constructor(value, self.event.kwargs.get("auto_wrap_policy"), "ModuleWrapPolicy", "functools.partial")
        classes = None
        if built is not None:
            call, bound, name = built
            if name == "ModuleWrapPolicy" and len(call.args) == 1:
                classes = call.args[0].value
            elif name == "functools.partial" and call.args and _fsdp_name(self.event.file, call.args[0].value) == "transformer_auto_wrap_policy":
                classes = next((arg.value for arg in call.args[1:] if arg.keyword and arg.keyword.value == "transformer_layer_cls"), None)
        if isinstance(classes, (cst.Set, cst.List, cst.Tuple)) and all(_dotted(e.value) for e in classes.elements):
            self.block_classes = [self.code(element.value) for element in classes.elements]
            if built[1] is not None:
                self.drop_definition(built[1])
            return
        self.manual.append(f"`auto_wrap_policy={self.quote(value)}`: call `fully_shard` on each module the policy wraps, bottom-up, "
                           f"then on the root (only `ModuleWrapPolicy` and `transformer_auto_wrap_policy` with a literal set of classes are migrated)")

    def mixed_precision(self, value) -> None:
        from fsdplint.fixes import Replace

        built = self.constructor(value, self.event.kwargs.get("mixed_precision"), "MixedPrecision", "MixedPrecisionPolicy")
        if built is None:
            self.manual.append(f"`mixed_precision={self.quote(value)}`: build a `MixedPrecisionPolicy(param_dtype=..., reduce_dtype=...)` in this file and pass it as `mp_policy=`")
            return
        call, bound, name = built
        allowed = {"param_dtype", "reduce_dtype", "buffer_dtype", "cast_forward_inputs"}
        unknown = [arg.keyword.value if arg.keyword else "positional" for arg in call.args if not arg.keyword or arg.keyword.value not in allowed]
        if unknown:
            self.manual.append(f"`MixedPrecision({', '.join(unknown)}=...)` has no FSDP2 equivalent")
            return
        if any(arg.keyword.value == "buffer_dtype" for arg in call.args):
            self.dropped.append("`buffer_dtype`: FSDP2 keeps buffers in their own dtype")
        self.need("torch.distributed.fsdp", "MixedPrecisionPolicy")
        if name == "MixedPrecisionPolicy":  # already converted by another wrap's migration
            self.keywords.append(f"mp_policy={self.code(value)}")
            return
        if bound is not None and self.named_only_here(bound):  # `bf16 = MixedPrecision(...)` becomes the FSDP2 policy
            self.keywords.append(f"mp_policy={self.code(value)}")
            self.operations.append(Replace(call, _mixed_precision_policy))
        else:  # inline, so that other FSDP1 uses of the variable keep their MixedPrecision
            self.keywords.append(f"mp_policy={self.code(_mixed_precision_policy(call))}")

    def cpu_offload(self, value) -> None:
        built = self.constructor(value, self.event.kwargs.get("cpu_offload"), "CPUOffload")
        if built is None:
            self.manual.append(f"`cpu_offload={self.quote(value)}`: pass `offload_policy=CPUOffloadPolicy()` for `CPUOffload(offload_params=True)`")
            return
        if built[1] is not None:
            self.drop_definition(built[1])
        offload = next((arg.value for arg in built[0].args if arg.keyword is None or arg.keyword.value == "offload_params"), None)
        if offload is not None and _literal_bool(offload) is None:
            self.manual.append(f"`cpu_offload={self.quote(value)}`: pass `offload_policy=CPUOffloadPolicy()` when it offloads")
        elif offload is not None and _literal_bool(offload):
            self.keywords.append("offload_policy=CPUOffloadPolicy()")
            self.need("torch.distributed.fsdp", "CPUOffloadPolicy")

    def sync_module_states(self, value) -> None:
        from fsdplint.rulekit import qualified_reference, unused_name

        if _literal_bool(value) is False:
            return
        dist = qualified_reference(self.event.file, "torch.distributed")
        model = self.module
        if _literal_bool(value) is None or dist is None or not self.rebinds_or_stands_alone():
            self.manual.append(f"`sync_module_states=`: after sharding, broadcast rank 0's weights with "
                               f"`set_model_state_dict({model}, full_state, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))`")
            return
        state = unused_name(self.event, "rank0_state")
        self.before.append(f"{state} = {model}.state_dict() if {dist}.get_rank() == 0 else {{}}  # synced to every rank after sharding")
        self.after.append(f"set_model_state_dict({model}, {state}, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))")
        self.need(_STATE_DICT_OPTIONS, "StateDictOptions", "set_model_state_dict")

    def rebinds_or_stands_alone(self) -> bool:
        """The wrap is `x = FSDP(...)` or a bare `FSDP(...)`: code after it runs after the sharding."""
        import libcst as cst

        small = self.event.statement.body[0] if isinstance(self.event.statement, cst.SimpleStatementLine) else None
        return isinstance(small, (cst.Assign, cst.Expr)) and small.value is self.event.node

    @staticmethod
    def named_only_here(bound) -> bool:
        """`name = Config(...)` is a statement of its own and the file's code names `name` only there
        and in the wrap's argument (comments and strings aside)."""
        import libcst as cst

        from fsdplint.rulekit import is_simple_statement

        statement = bound.statement
        if not is_simple_statement(statement) or not isinstance(statement.body[0], cst.Assign) or len(statement.body[0].targets) != 1:
            return False
        target = statement.body[0].targets[0].target
        return isinstance(target, cst.Name) and _names(bound.file.source.text)[target.value] == 2

    def drop_definition(self, bound) -> None:
        """Remove `policy = ModuleWrapPolicy(...)` when nothing else in the file names `policy`."""
        import libcst as cst

        from fsdplint.fixes import Replace

        if self.named_only_here(bound):
            self.operations.append(Replace(bound.statement, lambda node: cst.RemoveFromParent()))

    # the wrap itself

    def place(self) -> None:
        """`x = FSDP(model, ...)` -> the statements before, the loop over blocks, `x = fully_shard(model, ...)`,
        the statements after; the blank lines and comments above the wrap stay above all of them."""
        import libcst as cst

        from fsdplint.fixes import Replace, parse_statements
        from fsdplint.rulekit import is_simple_statement, unused_name

        if self.manual:
            return
        if not is_simple_statement(self.event.statement):
            self.manual.append("put the wrap on a line of its own")
            return
        keywords = "".join(f", {keyword}" for keyword in self.keywords)
        model = self.module
        before = list(self.before)
        if self.block_classes:
            block = unused_name(self.event, "submodule")
            classes = self.block_classes[0] if len(self.block_classes) == 1 else f"({', '.join(self.block_classes)})"
            before.append(f"for {block} in {model}.modules():\n    if isinstance({block}, {classes}):\n        fully_shard({block}{keywords})")
        self.need("torch.distributed.fsdp", "fully_shard")
        root = cst.parse_expression(f"fully_shard({model}{keywords})")
        self.operations.append(Replace(self.event.node, lambda node: root))
        if not before and not self.after:
            return
        ahead = parse_statements(self.event.file, "".join(f"{line}\n" for line in before)) if before else []
        behind = parse_statements(self.event.file, "".join(f"{line}\n" for line in self.after)) if self.after else []

        def surround(statement: cst.SimpleStatementLine):
            if not ahead:
                return cst.FlattenSentinel([statement, *behind])
            first = ahead[0].with_changes(leading_lines=statement.leading_lines)
            return cst.FlattenSentinel([first, *ahead[1:], statement.with_changes(leading_lines=[]), *behind])

        self.operations.append(Replace(self.event.statement, surround))

    # the model's uses

    def map_uses(self) -> None:
        from fsdplint.model import CALL, FSDP1_WRAPPER, METHOD

        for use in self.flow.events[self.event.index + 1:]:
            wrapper_attribute = self.wrapper_attribute(use)
            if wrapper_attribute:
                self.manual.append(f"`{wrapper_attribute}`: FSDP2 has no wrapper module; use the model itself")
            elif use.kind == METHOD and use.target is not None and not use.target.is_submodule:
                if self.flow.sharding_of(use.target, use.index, fsdp=1) is self.event:
                    self.method_use(use)
            elif use.kind == CALL and (use.qname or "").startswith(FSDP1_WRAPPER + ".") and use.args and use.args[0].ref:
                if self.flow.sharding_of(use.args[0].ref, use.index, fsdp=1) is self.event:
                    self.static_use(use)
            elif use.kind == CALL and use.qname == "isinstance" and len(use.node.args) == 2 and use.args and use.args[0].ref:
                if self.flow.sharding_of(use.args[0].ref, use.index, fsdp=1) is self.event:
                    self.isinstance_use(use)

    def wrapper_attribute(self, use) -> str | None:
        """`model.module` (or `_fsdp_wrapped_module`) in `use`: the FSDP1 wrapper's inner module."""
        model = self.event.target
        if model.is_submodule or self.flow.sharding_of(model, use.index, fsdp=1) is not self.event:
            return None
        for ref in (*use.targets, *use.arg_refs()):
            if ref.root == model.root and ref.path[:1] in (("module",), ("_fsdp_wrapped_module",)):
                return f"{self.module}.{ref.path[0]}"
        return None

    def isinstance_use(self, use) -> None:
        """`isinstance(model, FSDP)` -> `isinstance(model, FSDPModule)`: what `fully_shard` makes of a module."""
        from fsdplint.fixes import Replace

        checked = use.node.args[1].value
        if _fsdp_name(use.file, checked) != "FullyShardedDataParallel" or not self.in_this_file(use):
            return
        self.need("torch.distributed.fsdp", "FSDPModule")
        self.operations.append(Replace(checked, lambda node: _expression("FSDPModule")))

    def in_this_file(self, use) -> bool:
        if use.file is not self.event.file:
            self.manual.append(f"`{' '.join(use.file.code(use.node).split())}` in {use.file.display} uses the model too: migrate it with this file")
            return False
        return True

    def method_use(self, use) -> None:
        from fsdplint.fixes import Replace
        from fsdplint.rulekit import no_sync_fix, qualified_reference

        method, receiver = use.method, self.code(use.node.func.value)
        if method in ("no_sync", "clip_grad_norm_", "state_dict", "load_state_dict", "summon_full_params") and not self.in_this_file(use):
            return
        if method == "no_sync":
            fix = no_sync_fix(use)
            if fix is None:
                self.manual.append(f"`{receiver}.no_sync()`: use `{receiver}.set_requires_gradient_sync(False)` … `(True)`")
            else:
                self.operations += fix.operations
        elif method == "clip_grad_norm_":
            torch = qualified_reference(use.file, "torch")
            function = f"{torch}.nn.utils.clip_grad_norm_" if torch else "clip_grad_norm_"
            if not torch:
                self.need("torch.nn.utils", "clip_grad_norm_")
            self.operations.append(Replace(use.node, lambda node: node.with_changes(
                func=_expression(function), args=[_argument(f"{receiver}.parameters()"), *node.args])))
        elif method in ("state_dict", "load_state_dict") and not self.under_state_dict_type(use):
            self.state_dict_use(use, "full_state_dict=True")
        elif method == "summon_full_params":
            self.manual.append(f"`{receiver}.summon_full_params()`: read full parameters with `param.full_tensor()`")

    def under_state_dict_type(self, use):
        """The `FSDP.state_dict_type(...)` event of the `with` around `use`, if any."""
        withs = [parent for parent in use.parents if _state_dict_type_call(self.event.file, parent) is not None]
        return next((event for event in self.flow.events if withs and event.with_item and event.statement is withs[-1]
                     and (event.qname or "").endswith(".state_dict_type")), None)

    def state_dict_use(self, use, options: str) -> None:
        """`m.state_dict()` -> `get_model_state_dict(m, ...)`, `m.load_state_dict(sd)` -> `set_model_state_dict(m, sd, ...)`."""
        from fsdplint.fixes import Replace

        receiver = self.code(use.node.func.value)
        arguments = [self.code(arg) for arg in use.node.args]
        if use.method == "state_dict" and not arguments:
            replacement = f"get_model_state_dict({receiver}, options=StateDictOptions({options}))"
        elif use.method == "load_state_dict" and len(arguments) == 1 and use.node.args[0].keyword is None:
            replacement = f"set_model_state_dict({receiver}, {arguments[0]}, options=StateDictOptions({options}))"
        else:
            self.manual.append(f"`{self.quote(use.node)}`: use `get_model_state_dict`/`set_model_state_dict`")
            return
        helper = "get_model_state_dict" if use.method == "state_dict" else "set_model_state_dict"
        self.need(_STATE_DICT_OPTIONS, "StateDictOptions", helper)
        self.operations.append(Replace(use.node, lambda node: _expression(replacement)))

    def static_use(self, use) -> None:
        from fsdplint.fixes import Replace

        name = use.qname.rsplit(".", 1)[-1]
        if not self.in_this_file(use):
            return
        if name == "state_dict_type" and use.with_item:
            self.state_dict_type(use)
        elif name == "optim_state_dict" and self.under_state_dict_type(use) and len(use.node.args) == 2:
            options = self.state_dict_options(self.under_state_dict_type(use))
            if options is not None:
                model, optimizer = (self.code(arg.value) for arg in use.node.args)
                replacement = f"get_optimizer_state_dict({model}, {optimizer}, options=StateDictOptions({options}))"
                self.need(_STATE_DICT_OPTIONS, "StateDictOptions", "get_optimizer_state_dict")
                self.operations.append(Replace(use.node, lambda node: _expression(replacement)))
        else:
            self.manual.append(f"`{self.quote(use.node.func)}(...)` is FSDP1 API with no mapping here")

    def state_dict_type(self, use) -> None:
        """`with FSDP.state_dict_type(m, FULL_STATE_DICT, cfg): body` -> body, its state-dict calls rewritten."""
        import libcst as cst

        from fsdplint.fixes import Replace
        from fsdplint.model import METHOD

        statement = use.statement
        options = self.state_dict_options(use)
        if options is None:
            return
        if len(statement.items) != 1 or statement.items[0].asname:
            self.manual.append("`FSDP.state_dict_type(...)` shares its `with`: rewrite it by hand")
            return
        for inner in self.flow.events[use.index + 1:]:
            if statement in inner.parents and inner.kind == METHOD and inner.method in ("state_dict", "load_state_dict") \
                    and inner.target is not None and not inner.target.is_submodule and self.flow.sharding_of(inner.target, inner.index, fsdp=1) is self.event:
                self.state_dict_use(inner, options)

        def unwrap(with_node: cst.With):
            body = list(with_node.body.body) if isinstance(with_node.body, cst.IndentedBlock) else [cst.SimpleStatementLine(with_node.body.body)]
            body[0] = body[0].with_changes(leading_lines=[*with_node.leading_lines, *body[0].leading_lines])
            return cst.FlattenSentinel(body)

        self.operations.append(Replace(statement, unwrap))
        config = use.node.args[2].value if len(use.node.args) > 2 else None
        built = self.constructor(config, use.args[2], "FullStateDictConfig", before=use.index) if config is not None and len(use.args) > 2 else None
        if built is not None and built[1] is not None:
            self.drop_definition(built[1])

    def state_dict_options(self, state_dict_type) -> str | None:
        """`full_state_dict=True, cpu_offload=True`: the options for an `FSDP.state_dict_type(...)` event."""
        call = state_dict_type.node
        args = call.args
        kind = _fsdp_name(self.event.file, args[1].value) if len(args) > 1 else None
        if kind == "StateDictType.SHARDED_STATE_DICT" and len(args) == 2:
            return "full_state_dict=False"
        if kind != "StateDictType.FULL_STATE_DICT":
            self.manual.append(f"`{self.quote(call)}`: only FULL_STATE_DICT (and SHARDED_STATE_DICT with no config) are migrated")
            return None
        if len(args) == 2:
            return "full_state_dict=True"
        built = self.constructor(args[2].value, state_dict_type.args[2] if len(state_dict_type.args) > 2 else None, "FullStateDictConfig",
                                 before=state_dict_type.index)
        flags = {arg.keyword.value: _literal_bool(arg.value) for arg in built[0].args if arg.keyword} if built else None
        if flags is None or set(flags) - {"offload_to_cpu", "rank0_only"} or flags.get("offload_to_cpu", False) != flags.get("rank0_only", False):
            self.manual.append(f"`{self.quote(args[2].value)}`: FSDP2 gives rank 0 alone the full state dict exactly when it offloads it "
                               f"(`cpu_offload=True`); pick `StateDictOptions` by hand")
            return None
        return f"full_state_dict=True, cpu_offload={flags.get('offload_to_cpu', False)}"


def _finding(migrations: list[_Migration]) -> Finding:
    """One finding for a wrap seen from several entry flows: fixed only if every flow's uses can be."""
    from fsdplint.fixes import AddImport, Fix

    built = [migration.build() for migration in migrations]
    first = built[0]
    call = first.event.node
    what = first.code(call.func)
    manual = list(dict.fromkeys(item for migration in built for item in migration.manual))
    if manual:
        return Finding(first.event.file, call, f"`{what}(...)` is FSDP1; migrate it by hand: " + "; ".join(manual))
    operations = {}
    for operation in (operation for migration in built for operation in migration.operations):
        key = (operation.module, operation.names) if isinstance(operation, AddImport) else (type(operation), id(operation.node))
        operations.setdefault(key, operation)
    dropped = f" (dropped: {'; '.join(first.dropped)})" if first.dropped else ""
    unseen = next((text for text in map(_Migration.unseen_uses, built) if text), "")
    fix = Fix(f"Migrate to `fully_shard`{dropped}", safe=False, operations=list(operations.values()))
    return Finding(first.event.file, call, f"`{what}(...)` is FSDP1: migrate to FSDP2 `fully_shard`{dropped}{unseen}", fix)


def _fsdp1_api_on_models_wrapped_elsewhere(program) -> Iterable[Finding]:
    """`FSDP.state_dict_type(model, ...)` where no flow ties `model` to a wrap (a checkpoint helper that
    takes the model as a parameter): it must be migrated by hand along with the wrap."""
    from fsdplint.model import CALL, FSDP1_WRAPPER

    calls = {}
    attributed: set[int] = set()
    for flow in program.flows:
        for event in flow.of_kind(CALL):
            if not (event.qname or "").startswith(FSDP1_WRAPPER + "."):
                continue
            calls.setdefault(id(event.node), event)
            if event.args and event.args[0].ref and flow.sharding_of(event.args[0].ref, event.index, fsdp=1) is not None:
                attributed.add(id(event.node))
    for key, event in calls.items():
        if key in attributed:
            continue
        api = event.qname.rsplit(".", 1)[-1]
        instead = next((advice for names, advice in _FSDP2_INSTEAD if api in names), "see the FSDP2 tutorial's migration table")
        yield Finding(event.file, event.node, f"`{event.file.code(event.node.func).strip()}(...)` is FSDP1 API on a model wrapped elsewhere: "
                                              f"migrate it by hand with the model's wrap ({instead})")


def _fsdp_name(file, node) -> str | None:
    """`ShardingStrategy.FULL_SHARD`, `MixedPrecision`, `ModuleWrapPolicy`: an FSDP name, submodule dropped."""
    qualified = file.qualify(node)
    if qualified is None or not _FSDP_SUBMODULES.match(qualified):
        return None
    return _FSDP_SUBMODULES.sub("", qualified)


def _state_dict_type_call(file, statement):
    import libcst as cst

    if not isinstance(statement, cst.With):
        return None
    for item in statement.items:
        call = item.item
        if isinstance(call, cst.Call) and _fsdp_name(file, call.func) == "FullyShardedDataParallel.state_dict_type":
            return call
    return None


def _literal_bool(node) -> bool | None:
    import libcst as cst

    return {"True": True, "False": False}.get(node.value) if isinstance(node, cst.Name) else None


def _expression(code: str):
    import libcst as cst

    return cst.parse_expression(code)


def _argument(code: str):
    import libcst as cst

    return cst.Arg(_expression(code), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))


def _mixed_precision_policy(call):
    """`MixedPrecision(param_dtype=a, buffer_dtype=b)` -> `MixedPrecisionPolicy(param_dtype=a)`."""
    import libcst as cst

    args = [arg for arg in call.args if arg.keyword.value != "buffer_dtype"]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(func=cst.Name("MixedPrecisionPolicy"), args=args)


def _unused_fsdp1_imports(file) -> Iterable[Finding]:
    """After the migration: FSDP1 names the file imports from torch.distributed.fsdp but no longer uses."""
    import libcst as cst

    from fsdplint.fixes import Fix, Replace

    if "torch.distributed.fsdp.fully_shard" not in file.imports.values():
        return
    imports = [statement for statement in file.module.body
               if isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], cst.ImportFrom)
               and not isinstance(statement.body[0].names, cst.ImportStar)
               and (_dotted(statement.body[0].module) if statement.body[0].module else "").startswith("torch.distributed.fsdp")]
    if not imports:
        return
    used = _names(file.source.text) - sum((_names(file.code(statement)) for statement in imports), Counter())
    for statement in imports:
        node = statement.body[0]
        unused = [alias for alias in node.names if _dotted(alias.name).rsplit(".", 1)[-1] in _FSDP1_NAMES and not used[_local(alias)]]
        if not unused:
            continue
        kept = [alias for alias in node.names if alias not in unused]

        def without_unused(line, kept=kept):
            if not kept:
                return cst.RemoveFromParent()
            names = [*kept[:-1], kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
            return line.with_changes(body=[line.body[0].with_changes(names=names)])

        listed = ", ".join(f"`{_local(alias)}`" for alias in unused)
        yield Finding(file, node, f"FSDP1 import no longer used after the migration: {listed}",
                      Fix(f"Remove {listed}", safe=False, operations=[Replace(statement, without_unused)]))


def _names(code: str) -> Counter:
    """How often each name occurs in `code` as a name: comments and strings do not count."""
    tokens = tokenize.generate_tokens(io.StringIO(code).readline)
    try:
        return Counter(token.string for token in tokens if token.type == tokenize.NAME)
    except (tokenize.TokenError, SyntaxError):
        return Counter()


def _dotted(node) -> str:
    from fsdplint.model import dotted_name

    return dotted_name(node) or ""


def _local(alias) -> str:
    import libcst as cst

    return alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else _dotted(alias.name)
