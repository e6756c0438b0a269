"""The torch.distributed vocabulary the semantic model reads names with: which names hold a rank, which
conditions only some ranks pass, and which calls every rank of a process group must make.

Pure functions of names and qualified names; the model (fsdplint/model/) applies them to values and
events. Nothing here imports torch or libcst.
"""

from __future__ import annotations

import re

# Text that only a file using torch.distributed or FSDP holds, or one started by a distributed launcher
# (its rank variables: `RANK`, `LOCAL_RANK`, `SLURM_PROCID`, a `local_rank`): analysis starts from such
# files alone, so a repository with no distributed code (sympy defines two `get_rank`s) is never parsed.
# The names FSDP2 and FSDP1 shard with: the text of a file that uses FSDP.
FSDP_TOKENS = ("fully_shard", "FullyShardedDataParallel")
DISTRIBUTED_MARKERS = ("torch.distributed", "from torch import distributed", *FSDP_TOKENS, "RANK", "SLURM_PROCID", "local_rank")

# Functions that return the module they are given, changed in place, or a wrapper that runs it and
# holds its parameters, whose attributes are the module's (`torch.compile`'s OptimizedModule).
RETURNS_ITS_MODULE = frozenset({
    "torch.compile",
    "torch.distributed.tensor.parallel.parallelize_module",
    "torch.distributed._composable.replicate",
    "torch.distributed._composable.replicate.replicate",
    "torch.distributed._composable.checkpoint",
    "torch.distributed._composable.checkpoint_activation.checkpoint",
})

# torch.distributed functions that return None: `group = dist.init_process_group(...)` holds no group,
# and `dist.get_rank(group)` is then the global rank.
RETURNS_NONE = frozenset({"torch.distributed.init_process_group"})

# FSDP1 -> FSDP2, the one table FSDP501 (migration) and FSDP502 (FSDP1 arguments handed to fully_shard) read.
# ShardingStrategy member -> (reshard_after_forward, whether it needs a 2-D (replicate, shard) mesh).
FSDP1_STRATEGIES = {"FULL_SHARD": (True, False), "SHARD_GRAD_OP": (False, False), "HYBRID_SHARD": (True, True), "_HYBRID_SHARD_ZERO2": (False, True)}
# FullyShardedDataParallel keywords that change only speed or memory, never results: dropped by a migration.
FSDP1_PERFORMANCE_ONLY = {
    "use_orig_params": "drop it: FSDP2 always keeps the original parameters",
    "limit_all_gathers": "drop it: FSDP2 needs no rate limiter",
    "forward_prefetch": "drop it, or prefetch explicitly with `set_modules_to_forward_prefetch`",
    "backward_prefetch": "drop it, or prefetch explicitly with `set_modules_to_backward_prefetch`",
}
# FullyShardedDataParallel keywords `fully_shard` has no keyword of the same name for: what to do instead.
FSDP1_KEYWORDS_INSTEAD = {
    "auto_wrap_policy": "call `fully_shard` on each block before the root (`for block in model.layers: fully_shard(block)`)",
    "device_id": "`fully_shard` takes its device from `mesh`",
    "device_mesh": "pass the mesh as `mesh=`",
    "process_group": "build a DeviceMesh from it with `DeviceMesh.from_group` and pass `mesh=`",
    "sync_module_states": "load weights with `set_model_state_dict(..., options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))`",
    "param_init_fn": "materialize with `to_empty(device=...)` and `reset_parameters()` after `fully_shard`",
    "ignored_modules": "pass their parameters as `ignored_params`",
    **FSDP1_PERFORMANCE_ONLY,
}

# Names (variables, attributes, `get_*` functions) that hold this process's rank.
_RANK_NAME = re.compile(r"(?:global_|local_|node_local_|dp_|ddp_|ddp_local_|data_parallel_|world_|process_|my_|cur_|current_)?rank(?:_id|_idx)?|(?:local_)?process_index")
_RANK_GETTER = re.compile(r"get_(?:\w+_)?rank|get_(?:local_)?process_index")
# Environment variables that hold a rank (torchrun, SLURM, Open MPI).
_RANK_ENV = re.compile(r"(?:\w+_)?RANK|SLURM_PROCID|SLURM_LOCALID")
# Names (variables, attributes, `get_*` functions) that hold the number of processes, and the
# environment variables that do.
_WORLD_SIZE_NAME = re.compile(r"(?:global_|dp_|ddp_|data_parallel_)?world_size|num_replicas|num_processes|n?procs|n_procs|num_ranks|dp_size|data_parallel_size")
_WORLD_SIZE_GETTER = re.compile(r"get_(?:\w+_)?world_size|get_num_processes")
WORLD_SIZE_VARIABLES = frozenset({"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
# Names of flags (or functions returning one) that are true on the main process only.
MAIN_PROCESS_FLAGS = frozenset({
    "is_main_process", "is_local_main_process", "is_main", "is_master", "is_master_process", "master_process",
    "is_global_zero", "is_local_zero", "is_rank_zero", "is_rank0", "is_rank_0", "is_first_rank", "is_main_rank",
    "is_world_process_zero", "is_local_process_zero", "is_leader", "is_chief", "is_master_ordinal",
})
# Decorators that make a function run on the main process only (Lightning, accelerate).
MAIN_PROCESS_DECORATORS = frozenset({"rank_zero_only", "on_main_process", "on_local_main_process", "main_process_only", "rank0_only"})

# Launchers that start processes of a function on this machine, taking (fn, args, nprocs, ...) by position;
# the function gets the index of its process as its first argument.
PROCESS_SPAWNERS = frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"})
# Command line dispatchers that run the function they are given (first by position) as the script, in
# this process, with the command line's arguments: `fire.Fire(main)`.
SCRIPT_DISPATCHERS = frozenset({"fire.Fire", "typer.run", "jsonargparse.CLI"})
# Classes that run `target=fn` in a new process of this machine with the `args=` the code gives; a start
# method's context (`multiprocessing.get_context("spawn")`, a fixture's `mp_ctx`) has one by the last name.
PROCESS_CLASSES = frozenset({"multiprocessing.Process", "torch.multiprocessing.Process", "multiprocessing.context.Process"})
PROCESS_CLASS_NAME = "Process"
# Calls that count this machine's accelerators.
DEVICE_COUNTS = frozenset({"torch.cuda.device_count", "torch.accelerator.device_count", "torch.xpu.device_count"})
INIT_PROCESS_GROUP = "torch.distributed.init_process_group"
# torch's floating-point dtypes under each of their names: the name -> the dtype (`torch.half` is `torch.float16`)
TORCH_DTYPES = {"torch.float16": "torch.float16", "torch.half": "torch.float16", "torch.bfloat16": "torch.bfloat16",
                "torch.float32": "torch.float32", "torch.float": "torch.float32", "torch.float64": "torch.float64",
                "torch.double": "torch.float64"}
# Module methods that move its parameters to a device.
MODULE_MOVES = frozenset({"to", "cuda", "to_empty", "xpu", "npu", "mps", "ipu"})
# Calls that change the device modules and tensors are built on by default.
DEFAULT_DEVICE_SETTERS = frozenset({"torch.set_default_device", "torch.set_default_tensor_type"})
# `init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None, ...)`, by the names it is imported as.
INIT_DEVICE_MESH = frozenset({"torch.distributed.device_mesh.init_device_mesh", "torch.distributed.init_device_mesh"})
# `init_process_group` addresses only processes of one machine meet at: a file store (a file of this
# machine's file system) and the loopback address.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
LOCAL_INIT_METHODS = ("file://", *(f"tcp://[{host}]:" if ":" in host else f"tcp://{host}:" for host in LOOPBACK_HOSTS))
# Calls that choose this process's device, or try to (FSDP305 reports the ones that do not):
# `init_device_mesh` sets it from LOCAL_RANK while CUDA is not yet initialized, and accelerate's state
# (built by `Accelerator()`) calls `torch.cuda.set_device` with the local process's device.
DEVICE_CHOOSING_CALLS = frozenset({
    "torch.cuda.set_device", "torch.accelerator.set_device_index", "torch.cuda.device", "torch.accelerator.device_index",
    "torch.distributed.device_mesh.init_device_mesh",
    "accelerate.Accelerator", "accelerate.accelerator.Accelerator", "accelerate.PartialState", "accelerate.state.PartialState",
    "accelerate.state.AcceleratorState",
})
# Methods of libraries' objects that destroy the default process group, by the class that builds the
# object: accelerate's `end_training()` calls `self.state.destroy_process_group()` (accelerate >= 0.34).
GROUP_DESTROYING_METHODS = {"accelerate.Accelerator": frozenset({"end_training"})}
# The environment variable of the address `init_process_group`'s default `env://` meets at.
MASTER_ADDRESS_VARIABLE = "MASTER_ADDR"
WORLD_SIZE_VARIABLE = "WORLD_SIZE"  # the number of processes the default `env://` init waits for
# Stores that processes of one machine share: a file of its file system.
LOCAL_STORES = frozenset({"torch.distributed.FileStore"})

# torch.distributed functions that every rank of the group must call.
PROCESS_GROUP_COLLECTIVES = {  # name -> the position of its `group` argument
    "barrier": 0, "monitored_barrier": 0, "all_reduce": 2, "all_gather": 2, "all_gather_object": 2,
    "all_gather_into_tensor": 2, "_all_gather_base": 2, "reduce_scatter": 3, "reduce_scatter_tensor": 3,
    "_reduce_scatter_base": 3, "broadcast": 2, "broadcast_object_list": 2, "reduce": 3, "gather": 3, "gather_object": 3,
    "scatter": 3, "scatter_object_list": 3, "all_to_all": 2, "all_to_all_single": 4,
}
_PROCESS_GROUP_MODULES = frozenset({"torch.distributed", "torch.distributed.distributed_c10d"})
# torch.distributed.checkpoint: every rank writes or reads its part, coordinated by collectives.
# Where `torch.save` writes bytes that stay in this process: no file another process loads (a
# round-trip check through `io.BytesIO`).
IN_MEMORY_BUFFERS = frozenset({"io.BytesIO"})
# Builtins that only read the object they are given: they change no attribute of it and initialize
# none of its weights (R3-v2's `getattr(self, ...)`, Cornstarch's `isinstance(module, nn.ModuleList)`).
READ_ONLY_BUILTINS = frozenset({"getattr", "hasattr", "isinstance", "type", "len", "print", "id", "repr", "str", "callable"})
DCP_SAVERS = frozenset({"save", "async_save", "save_state_dict"})
DCP_COLLECTIVES = DCP_SAVERS | {"load", "load_state_dict"}
DCP_MODULE = "torch.distributed.checkpoint"
# torch.distributed.checkpoint.state_dict helpers: collectives when the state dict is full.
STATE_DICT_MODULE = "torch.distributed.checkpoint.state_dict"
STATE_DICT_GETTERS = frozenset({"get_model_state_dict", "get_optimizer_state_dict", "get_state_dict"})
STATE_DICT_SETTERS = frozenset({"set_model_state_dict", "set_optimizer_state_dict", "set_state_dict"})
# StateDictOptions fields that make a helper gather or scatter across ranks.
COLLECTIVE_STATE_DICT_OPTIONS = frozenset({"full_state_dict", "broadcast_from_rank0"})
# DTensor, by the names torch has exported it under.
DTENSOR_CLASSES = ("torch.distributed.tensor.DTensor", "torch.distributed._tensor.DTensor", "torch.distributed._tensor.api.DTensor",
                   "torch.distributed.tensor._api.DTensor")
# Text that marks a file that may reach a collective (the prefilter's trigger tokens of the rules about
# collectives, FSDP203 and FSDP308): the collectives' own names, the state-dict helpers that gather, and
# FSDP itself, whose forward gathers. Broader tokens (`state_dict`, `gather`, `rank`) parse most of a
# training repository for little gain.
COLLECTIVE_TOKENS = ("barrier", "all_reduce", "all_gather", "gather_object", "dist.gather", "distributed.gather",
                     "broadcast", "reduce_scatter", "scatter_object_list", "dist.scatter", "distributed.scatter",
                     "all_to_all", "full_tensor", "get_model_state_dict", "get_optimizer_state_dict", "get_state_dict",
                     "set_model_state_dict", "set_optimizer_state_dict", "set_state_dict", "summon_full_params",
                     "optim_state_dict", "FULL_STATE_DICT", "distributed.checkpoint", "dcp.", "unshard", "fully_shard",
                     "FullyShardedDataParallel")
# FullyShardedDataParallel (FSDP1) static methods that all-gather.
# Attributes that say whether FSDP1 shards: a flat parameter handle's `uses_sharded_strategy` (what
# torch's own `FullyShardedDataParallel.clip_grad_norm_` tests over `_all_handles`, and code copied from
# it), and the wrapped module's `sharding_strategy`.
HANDLE_SHARDING_ATTRIBUTE = "uses_sharded_strategy"
MODULE_SHARDING_ATTRIBUTE = "sharding_strategy"
FSDP1_COLLECTIVES = frozenset({"summon_full_params", "full_optim_state_dict", "optim_state_dict", "sharded_optim_state_dict"})


# Calls that report and reach no collective, whatever they are given: logging, warnings, printing
# (`logger.info(...)` by its method's name, the logger being any object).
_REPORTING_MODULES = ("logging.", "warnings.")
REPORTING_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log", "print", "write", "flush"})


# Methods whose work is known and reaches no collective (the ones that may, `full_tensor`, `unshard`,
# FSDP1's `state_dict`, are Flow.collective's): torch.nn.Module's (but `forward`), a tensor's and a
# container's or string's most common.
KNOWN_METHODS = frozenset({
    "add_module", "apply", "bfloat16", "buffers", "children", "compile", "cpu", "cuda", "double", "eval", "extra_repr",
    "float", "get_buffer", "get_extra_state", "get_parameter", "get_submodule", "half", "ipu", "load_state_dict", "modules",
    "mtia", "named_buffers", "named_children", "named_modules", "named_parameters", "parameters", "register_backward_hook",
    "register_buffer", "register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
    "register_full_backward_pre_hook", "register_load_state_dict_post_hook", "register_load_state_dict_pre_hook",
    "register_module", "register_parameter", "register_state_dict_post_hook", "register_state_dict_pre_hook",
    "requires_grad_", "set_extra_state", "set_submodule", "share_memory", "state_dict", "to", "to_empty", "train", "type",
    "xpu", "zero_grad",
    "item", "tolist", "numpy", "detach", "clone", "size", "dim", "numel", "view", "reshape", "contiguous", "copy_", "fill_",
    "zero_", "mul_", "add_", "div_", "sum", "mean", "max", "min", "float", "long", "int", "bool", "backward",
    "append", "extend", "insert", "pop", "remove", "clear", "keys", "values", "items", "get", "update", "setdefault", "copy",
    "format", "join", "split", "strip", "startswith", "endswith", "replace", "lower", "upper", "encode", "decode",
}) | REPORTING_METHODS


# What FullyShardedDataParallel defines itself (torch 2.13: nn.Module's methods and its own): any
# other attribute, a method of the wrapped module's class, it hands to the module it wraps.
FSDP1_OWN_METHODS = frozenset({
    "add_module", "apply", "bfloat16", "buffers", "check_is_root", "children", "clip_grad_norm_", "compile", "cpu", "cuda",
    "double", "eval", "extra_repr", "flatten_sharded_optim_state_dict", "float", "forward", "fsdp_modules",
    "full_optim_state_dict", "get_buffer", "get_extra_state", "get_parameter", "get_state_dict_type", "get_submodule", "half",
    "ipu", "load_state_dict", "module", "modules", "mtia", "named_buffers", "named_children", "named_modules",
    "named_parameters", "no_sync", "optim_state_dict", "optim_state_dict_to_load", "parameters", "register_backward_hook",
    "register_buffer", "register_comm_hook", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "register_full_backward_pre_hook", "register_load_state_dict_post_hook",
    "register_load_state_dict_pre_hook", "register_module", "register_parameter", "register_state_dict_post_hook",
    "register_state_dict_pre_hook", "rekey_optim_state_dict", "requires_grad_", "scatter_full_optim_state_dict",
    "set_extra_state", "set_state_dict_type", "set_submodule", "shard_full_optim_state_dict", "share_memory",
    "sharded_optim_state_dict", "state_dict", "state_dict_type", "summon_full_params", "to", "to_empty", "train", "type",
    "xpu", "zero_grad",
})


def runs_known_code(qname: str | None, method: str | None) -> bool:
    """A call whose work is known to reach no collective beyond what the model sees: torch's functions
    and the builtins are the model's; these are reporting (`print`, `logging.info`, `logger.warning`)
    and the common methods of modules, tensors and containers (`model.named_parameters()`)."""
    if method is not None:
        return method in KNOWN_METHODS
    return qname is not None and (qname == "print" or qname.startswith(_REPORTING_MODULES))


def is_group_bookkeeping(qname: str) -> bool:
    module, name = split_qname(qname)
    return module in _PROCESS_GROUP_MODULES and name in PROCESS_GROUP_BOOKKEEPING


def is_torch_name(qualified: str) -> bool:
    """A name of torch's (`torch.distributed.get_rank`): never a function of the checked files."""
    return qualified == "torch" or qualified.startswith("torch.")


def is_rank_name(name: str) -> bool:
    """`rank`, `local_rank`, `self.global_rank`'s `global_rank`, `self._rank`, `process_index`."""
    return bool(_RANK_NAME.fullmatch(name.lstrip("_")))


def is_rank_getter(name: str) -> bool:
    """`get_rank`, `get_global_rank`, `get_data_parallel_rank`, `get_process_index`."""
    return bool(_RANK_GETTER.fullmatch(name.lstrip("_")))


def is_world_size_name(name: str) -> bool:
    """`world_size`, `self.num_replicas`'s `num_replicas`, `get_world_size`, `get_data_parallel_world_size`."""
    name = name.lstrip("_")
    return bool(_WORLD_SIZE_NAME.fullmatch(name) or _WORLD_SIZE_GETTER.fullmatch(name))


def is_rank_env_var(name: str) -> bool:
    return bool(_RANK_ENV.fullmatch(name))


def is_main_process_flag(name: str) -> bool:
    """`is_main_process`, `self._is_rank_zero`, `get_is_master()`."""
    name = name.lstrip("_")
    return name in MAIN_PROCESS_FLAGS or name.startswith("get_") and name[4:] in MAIN_PROCESS_FLAGS


def split_qname(qname: str) -> tuple[str, str]:
    module, _, name = qname.rpartition(".")
    return module, name


def is_process_group_collective(qname: str) -> bool:
    module, name = split_qname(qname)
    return module in _PROCESS_GROUP_MODULES and name in PROCESS_GROUP_COLLECTIVES


def is_dcp_collective(qname: str) -> bool:
    module, name = split_qname(qname)
    return module == DCP_MODULE and name in DCP_COLLECTIVES


def is_dcp_save(qname: str) -> bool:
    module, name = split_qname(qname)
    return module == DCP_MODULE and name in DCP_SAVERS


def is_state_dict_getter(qname: str) -> bool:
    module, name = split_qname(qname)
    return module == STATE_DICT_MODULE and name in STATE_DICT_GETTERS


def is_state_dict_helper(qname: str) -> bool:
    module, name = split_qname(qname)
    return module == STATE_DICT_MODULE and name in STATE_DICT_GETTERS | STATE_DICT_SETTERS


def is_fsdp1_collective(qname: str) -> bool:
    module, name = split_qname(qname)
    return module.endswith("FullyShardedDataParallel") and name in FSDP1_COLLECTIVES


# The default process group: what starts it, what needs it (FSDP306, FSDP307).
# `init_device_mesh` and a `DeviceMesh(...)` start it themselves when no group exists (`init_process_group()`
# with no backend), and so does `fully_shard` with no `mesh=` (torch 2.13: `_init_default_mesh`).
PROCESS_GROUP_STARTERS = frozenset({
    INIT_PROCESS_GROUP, *INIT_DEVICE_MESH, "torch.distributed.device_mesh.DeviceMesh", "torch.distributed.DeviceMesh",
    "torch.distributed.fsdp.fully_shard",
})
# Calls that raise `Default process group has not been initialized` before a group exists: the rank and
# size queries, group creation, and every collective and point-to-point call.
NEEDS_PROCESS_GROUP = frozenset({
    "get_rank", "get_world_size", "get_backend", "new_group", "new_subgroups", "send", "recv", "isend", "irecv",
    *PROCESS_GROUP_COLLECTIVES,
})
# Calls that ask whether a group exists: code that asks may read the rank only where one does.
PROCESS_GROUP_QUERIES = frozenset({"torch.distributed.is_initialized", "torch.distributed.distributed_c10d.is_initialized"})
# Tests of whether the run is distributed at all: the same on every rank, and where false, one process runs.
DISTRIBUTED_RUN_TESTS = PROCESS_GROUP_QUERIES | {"torch.distributed.is_available"}
# torch.distributed calls that neither need nor start a process group.
PROCESS_GROUP_FREE = frozenset({"is_available", "is_nccl_available", "is_gloo_available", "is_mpi_available", "is_ucc_available",
                                "is_xccl_available", "is_torchelastic_launched", "get_node_local_rank"})
# torch.distributed calls that make no communicator: the group's queries and its teardown (an NCCL
# group builds its communicators at its first collective).
PROCESS_GROUP_BOOKKEEPING = PROCESS_GROUP_FREE | {"destroy_process_group", "get_rank", "get_world_size", "get_backend", "is_initialized"}
# The tensor arguments of the calls that move tensors, by position and keyword: every one of them must be
# on a device the group's backend serves (the object collectives move their objects themselves).
TENSOR_ARGUMENTS = {
    "all_reduce": ((0, "tensor"),), "broadcast": ((0, "tensor"),), "reduce": ((0, "tensor"),),
    "all_gather": ((1, "tensor"),), "all_gather_into_tensor": ((0, "output_tensor"), (1, "input_tensor")),
    "reduce_scatter_tensor": ((0, "output"), (1, "input")), "reduce_scatter": ((0, "output"),),
    "gather": ((0, "tensor"),), "scatter": ((0, "tensor"),), "all_to_all_single": ((0, "output"), (1, "input")),
    "send": ((0, "tensor"),), "recv": ((0, "tensor"),), "isend": ((0, "tensor"),), "irecv": ((0, "tensor"),),
}
# torch functions that make a new tensor on the device given as `device=` (on the default device without one).
TENSOR_FACTORIES = frozenset({
    "torch.tensor", "torch.as_tensor", "torch.zeros", "torch.ones", "torch.empty", "torch.full", "torch.rand", "torch.randn",
    "torch.randint", "torch.arange", "torch.linspace", "torch.eye", "torch.zeros_like", "torch.ones_like", "torch.empty_like",
    "torch.full_like", "torch.rand_like", "torch.randn_like",
})


def needs_process_group(qualified: str) -> bool:
    """`torch.distributed.get_rank`, `...all_reduce`, `...new_group`: raises before a default group exists."""
    module, name = split_qname(qualified)
    return module in _PROCESS_GROUP_MODULES and name in NEEDS_PROCESS_GROUP


def tensor_arguments(qualified: str) -> tuple[tuple[int, str], ...]:
    """The (position, keyword) of each tensor a torch.distributed call sends or receives; () for others."""
    module, name = split_qname(qualified)
    return TENSOR_ARGUMENTS.get(name, ()) if module in _PROCESS_GROUP_MODULES else ()


# Data loading: what feeds each rank its batches (FSDP310, FSDP311).
DATA_LOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
DISTRIBUTED_SAMPLERS = frozenset({"torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"})
# Classes a map-style dataset of the run derives from, and those that make it iterable-style instead.
MAP_DATASET_BASES = frozenset({"torch.utils.data.Dataset", "torch.utils.data.dataset.Dataset"})
ITERABLE_DATASET_BASES = frozenset({"torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset",
                                    "torch.utils.data.IterDataPipe", "torch.utils.data.datapipes.datapipe.IterDataPipe"})
# Map-style datasets of torch's: every rank that builds one holds all of it.
MAP_DATASETS = frozenset({"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"})
# Wrappers that train a model replicated or sharded over the ranks of a process group.
DATA_PARALLEL_WRAPPERS = frozenset({"torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel"})
# Contexts under which nothing records gradients: code under them evaluates, it does not train.
GRADIENT_FREE_CONTEXTS = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad",
                                    "torch.autograd.grad_mode.inference_mode"})
# Progress bars that iterate what they are given, as it is.
PROGRESS_BARS = frozenset({"tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.std.tqdm"})
# A copy of an object: built by what built the original, holding what it holds (a loader's copy, its
# sampler and that sampler's epoch), a new object of its own.
COPIES = frozenset({"copy.deepcopy", "copy.copy"})
# Calls whose result iterates as their first argument does, and which do nothing else with it.
ITERATE_AS_GIVEN = PROGRESS_BARS | COPIES
