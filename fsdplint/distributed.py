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
DISTRIBUTED_MARKERS = ("torch.distributed", "from torch import distributed", "fully_shard", "FullyShardedDataParallel",
                       "RANK", "SLURM_PROCID", "local_rank")

# torch.distributed functions that return the module they are given, changed in place.
RETURNS_ITS_MODULE = frozenset({
    "torch.distributed.tensor.parallel.parallelize_module",
    "torch.distributed._composable.replicate",
    "torch.distributed._composable.replicate.replicate",
    "torch.distributed._composable.checkpoint",
    "torch.distributed._composable.checkpoint_activation.checkpoint",
})

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
# Calls that count this machine's accelerators.
DEVICE_COUNTS = frozenset({"torch.cuda.device_count", "torch.accelerator.device_count", "torch.xpu.device_count"})
INIT_PROCESS_GROUP = "torch.distributed.init_process_group"
# `init_process_group` addresses only processes of one machine meet at: a file store (a file of this
# machine's file system) and the loopback address.
LOCAL_INIT_METHODS = ("file://", "tcp://localhost:", "tcp://127.0.0.1:", "tcp://[::1]:")
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
DCP_COLLECTIVES = frozenset({"save", "load", "async_save", "save_state_dict", "load_state_dict"})
DCP_MODULE = "torch.distributed.checkpoint"
# torch.distributed.checkpoint.state_dict helpers: collectives when the state dict is full.
STATE_DICT_MODULE = "torch.distributed.checkpoint.state_dict"
STATE_DICT_GETTERS = frozenset({"get_model_state_dict", "get_optimizer_state_dict", "get_state_dict"})
STATE_DICT_SETTERS = frozenset({"set_model_state_dict", "set_optimizer_state_dict", "set_state_dict"})
# StateDictOptions fields that make a helper gather or scatter across ranks.
COLLECTIVE_STATE_DICT_OPTIONS = frozenset({"full_state_dict", "broadcast_from_rank0"})
# FullyShardedDataParallel (FSDP1) static methods that all-gather.
FSDP1_COLLECTIVES = frozenset({"summon_full_params", "full_optim_state_dict", "optim_state_dict", "sharded_optim_state_dict"})


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


def is_state_dict_helper(qname: str) -> bool:
    module, name = split_qname(qname)
    return module == STATE_DICT_MODULE and name in STATE_DICT_GETTERS | STATE_DICT_SETTERS


def is_fsdp1_collective(qname: str) -> bool:
    module, name = split_qname(qname)
    return module.endswith("FullyShardedDataParallel") and name in FSDP1_COLLECTIVES


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
# Progress bars that iterate what they are given, as it is.
PROGRESS_BARS = frozenset({"tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.std.tqdm"})
