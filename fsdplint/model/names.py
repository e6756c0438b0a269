"""Qualified names: the canonical name of an FSDP object under its private and historical paths, and a dotted name's text."""

from __future__ import annotations

import builtins

import libcst as cst

FULLY_SHARD = "torch.distributed.fsdp.fully_shard"
FSDP1_WRAPPER = "torch.distributed.fsdp.FullyShardedDataParallel"
FSDP2_MODULE = "torch.distributed.fsdp.FSDPModule"  # the class `fully_shard` gives a module
FSDP_CLASSES = frozenset({FSDP1_WRAPPER, FSDP2_MODULE})  # what a sharded or wrapped module is an instance of
# Methods only an FSDP2 module has: `if hasattr(model, "set_requires_gradient_sync"):` tests for one.
FSDP2_METHODS = ("set_requires_gradient_sync", "set_reshard_after_backward", "set_is_last_backward", "set_modules_to_forward_prefetch",
                 "set_modules_to_backward_prefetch", "set_post_optim_event", "set_reduce_scatter_divide_factor", "set_unshard_in_backward")

# Private and historical module paths that re-export the public FSDP objects.
_CANONICAL_PREFIXES = (
    ("torch.distributed._composable.fsdp.fully_shard.", "torch.distributed.fsdp."),
    ("torch.distributed._composable.fsdp.", "torch.distributed.fsdp."),
    ("torch.distributed.fsdp._fully_shard._fully_shard.", "torch.distributed.fsdp."),
    ("torch.distributed.fsdp._fully_shard.", "torch.distributed.fsdp."),
    ("torch.distributed.fsdp.fully_sharded_data_parallel.", "torch.distributed.fsdp."),
    ("torch.distributed.tensor._api.", "torch.distributed.tensor."),
    ("torch.distributed.checkpoint.state_dict_saver.", "torch.distributed.checkpoint."),
    ("torch.distributed.checkpoint.state_dict_loader.", "torch.distributed.checkpoint."),
)
BUILTINS = frozenset(dir(builtins))
CONSTANTS = frozenset({"None", "True", "False"})
def canonical(qname: str) -> str:
    for prefix, replacement in _CANONICAL_PREFIXES:
        if qname.startswith(prefix):
            return replacement + qname[len(prefix):]
    return qname


def dotted_name(node: cst.CSTNode) -> str | None:
    if type(node) is cst.Name:
        return node.value
    if type(node) is cst.Attribute:
        base = dotted_name(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


