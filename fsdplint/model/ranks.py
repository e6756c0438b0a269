"""What the model knows of ranks by torch's and the launchers' names: which calls and environment
variables give this process's rank or the world's size, and what a call computes from them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from fsdplint import distributed
from fsdplint.model.syntax import string_value
from fsdplint.model.values import (
    GLOBAL_RANK,
    LOCAL_RANK,
    RANK_COUNT,
    RANK_NUMBER,
    RANK_PART,
    SOME_RANK,
    Rank,
    Value,
)

if TYPE_CHECKING:
    from fsdplint.model.files import FileModel

_RANK_VARIABLES = {
    "RANK": GLOBAL_RANK, "SLURM_PROCID": GLOBAL_RANK, "OMPI_COMM_WORLD_RANK": GLOBAL_RANK, "PMI_RANK": GLOBAL_RANK,
    "LOCAL_RANK": LOCAL_RANK, "SLURM_LOCALID": LOCAL_RANK, "OMPI_COMM_WORLD_LOCAL_RANK": LOCAL_RANK, "MPI_LOCALRANKID": LOCAL_RANK,
}
RANK_CALLS = {"torch.distributed.get_rank": GLOBAL_RANK, "torch.distributed.get_node_local_rank": LOCAL_RANK}
_ENVIRONMENT_READS = frozenset({"os.environ.get", "os.getenv"})
_RANK_CONVERSIONS = frozenset({"int", "str"})  # builtins whose result is still the same rank


def rank_of_call(qname: str | None, func: cst.CSTNode, node: cst.Call, args: tuple[Value, ...]) -> Rank | None:
    """`dist.get_rank()`, `os.environ.get("LOCAL_RANK")`, `int(rank)`: the rank the call returns."""
    if qname in RANK_CALLS:
        # `dist.get_rank(group)`: the rank within a group; `get_rank(None)`, the default group's.
        default_group = not node.args or len(node.args) == len(args) == 1 and args[0].constant == "None"
        return Rank(RANK_CALLS[qname] if default_group else SOME_RANK)
    if qname in _ENVIRONMENT_READS and node.args:
        return rank_variable(node.args[0].value)
    if qname is None and type(func) is cst.Name and func.value in _RANK_CONVERSIONS and len(args) == 1:
        return args[0].rank
    return None


def rank_written(file: FileModel, node: cst.CSTNode) -> Rank | None:
    """The rank an expression holds by how it is written, where no walk evaluates it (a global of the
    module): `int(os.environ["RANK"])`, `os.environ.get("LOCAL_RANK")`, `dist.get_rank()`."""
    if type(node) is cst.Call:
        qname = file.qualify(node.func)
        if qname in RANK_CALLS and not node.args:
            return Rank(RANK_CALLS[qname])
        if qname in _ENVIRONMENT_READS and node.args:
            return rank_variable(node.args[0].value)
        if qname is None and type(node.func) is cst.Name and node.func.value in _RANK_CONVERSIONS and len(node.args) == 1:
            return rank_written(file, node.args[0].value)
        return None
    if type(node) is cst.Subscript and len(node.slice) == 1 and type(node.slice[0].slice) is cst.Index and file.qualify(node.value) == "os.environ":
        return rank_variable(node.slice[0].slice.value)
    return None


def is_rank_number(value: Value) -> bool:
    """The rank itself (not a string formatted from it), or a number computed from it."""
    return value.rank is not None and not value.rank.formatted or value.rank_derived == RANK_NUMBER


def rank_derived_of_call(qname: str | None, func: cst.CSTNode, node: cst.Call, args: tuple[Value, ...]) -> str | None:
    """`range(n + rank)`: RANK_COUNT; `range(rank, n, world_size)`, `itertools.islice(data, rank, None, world_size)`,
    `len(data[rank::world_size])` and `range(0, len(mine), batch_size)`: RANK_PART; `int(n + rank)`: still the number."""
    name = func.value if qname is None and type(func) is cst.Name else qname
    if any(arg.star for arg in node.args) or any(arg.keyword is not None for arg in node.args):
        return None
    ranked = [is_rank_number(arg) for arg in args]
    if name in _RANK_CONVERSIONS and len(args) == 1 and args[0].rank_derived == RANK_NUMBER:
        return RANK_NUMBER
    if name == "len" and len(args) == 1 and args[0].rank_derived == RANK_PART:
        return RANK_PART  # the length of a part picked by the rank: it differs unless the data divides evenly
    if name == "range" and any(arg.rank_derived == RANK_PART for arg in args[:2]) and not any(ranked):
        return RANK_PART  # `range(0, len(mine), batch_size)`
    if name == "range" and len(args) == 1:
        return RANK_COUNT if ranked[0] else None
    if name == "range" and len(args) in (2, 3) and ranked[0] != ranked[1]:
        # From the rank in strides of the step: a part; else one bound moves with the rank: the count.
        return RANK_PART if ranked[0] and len(args) == 3 else RANK_COUNT
    if name == "itertools.islice" and len(args) in (3, 4) and ranked[1] != ranked[2]:
        return RANK_PART
    return None


def world_size_of_call(qname: str | None, func: cst.CSTNode, node: cst.Call, args: tuple[Value, ...]) -> bool:
    """`dist.get_world_size()` (of the default group), `os.environ.get("WORLD_SIZE")`, `int(world_size)`."""
    if qname == "torch.distributed.get_world_size":
        return not node.args
    if qname in _ENVIRONMENT_READS and node.args:
        return is_world_size_variable(node.args[0].value)
    return qname is None and type(func) is cst.Name and func.value in _RANK_CONVERSIONS and len(args) == 1 and args[0].world_size


def is_world_size_variable(node: cst.CSTNode) -> bool:
    return type(node) is cst.SimpleString and string_value(node) in distributed.WORLD_SIZE_VARIABLES


def rank_variable(node: cst.CSTNode) -> Rank | None:
    """The rank an environment variable named by `node` holds (`"LOCAL_RANK"`, `"NODE_RANK"`), if it is one."""
    if not type(node) is cst.SimpleString:
        return None
    name = str(string_value(node))
    if name in _RANK_VARIABLES:
        return Rank(_RANK_VARIABLES[name], variable=name)
    return Rank(SOME_RANK, variable=name) if distributed.is_rank_env_var(name) else None


def reads_rank(node: cst.CSTNode) -> bool:
    """The expression reads this process's rank, as the walker names one: a variable or attribute
    called a rank (`self._local_rank`), a rank getter's call, or a rank's environment variable."""
    pending = [node]
    while pending:
        part = pending.pop()
        if type(part) is cst.Name and distributed.is_rank_name(part.value) or type(part) is cst.Attribute and distributed.is_rank_name(part.attr.value):
            return True
        if type(part) is cst.Call and type(part.func) in (cst.Name, cst.Attribute) \
                and distributed.is_rank_getter(part.func.value if type(part.func) is cst.Name else part.func.attr.value):
            return True
        if rank_variable(part) is not None:
            return True
        pending.extend(part.children)
    return False
