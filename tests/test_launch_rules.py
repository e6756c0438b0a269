"""The launch rules FSDP301-FSDP305 on the shapes real scripts take, beyond their fixtures: where a
rank value comes from, and what counts as choosing a device or destroying a group."""

from __future__ import annotations

import textwrap

import pytest

from fsdplint.api import check_source, fix_source

LAUNCH = ["FSDP301", "FSDP302", "FSDP303", "FSDP304", "FSDP305"]


def codes(source: str) -> list[tuple[int, str]]:
    return [(d.line, d.code) for d in check_source(textwrap.dedent(source), select=LAUNCH)]


def fixed(source: str, code: str) -> str:
    return fix_source(textwrap.dedent(source), select=[code])


@pytest.mark.parametrize("rank", [
    'int(os.environ["RANK"])', 'os.environ.get("RANK")', 'int(os.getenv("SLURM_PROCID", "0"))', "dist.get_rank()",
])
def test_a_global_rank_from_any_source_is_not_a_device_index(rank):
    assert codes(f"""
    import os
    import torch
    import torch.distributed as dist
    rank = {rank}
    torch.cuda.set_device(rank)
    """) == [(6, "FSDP302")]


@pytest.mark.parametrize("use", [
    "model.cuda(rank)", "model.to(rank)", 'torch.device("cuda", rank)', 'torch.device(f"cuda:{rank}")',
    "DDP(model, device_ids=[rank])", "FSDP(model, device_id=rank)", "torch.zeros(2, device=rank)",
])
def test_every_device_position_is_checked(use):
    assert codes(f"""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    rank = dist.get_rank()
    {use}
    """) == [(6, "FSDP302")]


def test_local_ranks_and_ranks_from_callers_are_not_reported():
    assert codes("""
    import os
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    torch.cuda.set_device(dist.get_node_local_rank())
    torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
    def worker(rank, world_size):
        torch.cuda.set_device(rank)
    mp.spawn(worker, args=(2,), nprocs=2)
    """) == []


def test_a_rank_passed_to_a_helper_is_reported_inside_it_without_a_fix():
    source = """
    import os
    import torch
    import torch.distributed
    def pick(index):
        torch.cuda.set_device(index)
    pick(int(os.environ["RANK"]))
    """
    assert codes(source) == [(6, "FSDP302")]
    assert fixed(source, "FSDP302") == textwrap.dedent(source)


def test_the_fix_reads_the_local_rank_the_launcher_sets_and_imports_os():
    source = """
    import torch.distributed as dist
    model.cuda(dist.get_rank())
    device = f"cuda:{dist.get_rank()}"
    """
    # `dist.get_rank()` says nothing of the launcher, which may not set LOCAL_RANK: an unsafe fix.
    assert fixed(source, "FSDP302") == textwrap.dedent(source)
    assert fix_source(textwrap.dedent(source), select=["FSDP302"], unsafe_fixes=True) == textwrap.dedent("""
    import torch.distributed as dist
    import os
    model.cuda(int(os.environ["LOCAL_RANK"]))
    device = f"cuda:{dist.get_rank()}"
    """)
    # A rank read from a launcher's variable: the same launcher's local rank, a safe fix. An f-string
    # handed over as it is gets its one replacement field changed, with the other quotes.
    assert fixed("""
    import os, torch
    rank = int(os.environ["SLURM_PROCID"])
    torch.cuda.set_device(f"cuda:{rank}")
    """, "FSDP302").endswith("""torch.cuda.set_device(f"cuda:{int(os.environ['SLURM_LOCALID'])}")\n""")


def test_a_device_string_made_from_the_rank_is_reported_once_without_a_fix():
    source = """
    import os, torch
    rank = int(os.environ["RANK"])
    device = f"cuda:{rank}"
    torch.cuda.set_device(device)
    model.to(device)
    """
    assert codes(source) == [(5, "FSDP302")]
    assert fixed(source, "FSDP302") == textwrap.dedent(source)


@pytest.mark.parametrize("argument, expected", [
    ('"cuda:0"', '"cuda"'),
    ("'cuda:1'", "'cuda'"),
    ('f"cuda:{local_rank}"', '"cuda"'),
    ('f"{device.type}:{local_rank}"', "device.type"),
    ('f"{kind}:{local_rank}"', 'f"{kind}"'),
    ("device", "device.type"),
    ("str(indexed)", "indexed.type"),
])
def test_mesh_device_types(argument, expected):
    source = f"""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    device = torch.device("cuda")
    indexed = torch.device("cuda", 1)
    mesh = init_device_mesh({argument}, (2,))
    """
    assert codes(source) == [(6, "FSDP303")]
    assert fixed(source, "FSDP303").splitlines()[-1] == f"mesh = init_device_mesh({expected}, (2,))"


def test_mesh_device_types_that_are_right():
    assert codes("""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    plain = torch.device("cuda")
    init_device_mesh("cuda", (2,))
    init_device_mesh(device_type="cpu", mesh_shape=(2,))
    init_device_mesh(str(plain), (2,))
    init_device_mesh(plain.type, (2,))
    init_device_mesh(f"{plain.type}", (2,))
    named = torch.device(f"{plain.type}")
    init_device_mesh(str(named), (2,))
    init_device_mesh(get_device_type(), (2,))
    """) == []


NCCL_SCRIPT = """
import os
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
{before}
dist.init_process_group({backend})
model = Net().cuda()
{after}
dist.destroy_process_group()
"""


@pytest.mark.parametrize("before, backend, after, expected", [
    ("", '"nccl"', "", [(7, "FSDP301")]),
    ("", '"nccl"', 'model = model.cuda(0)\nx = x.to("cuda:0")\ny = torch.device("cuda", 0)', [(7, "FSDP301")]),
    ("", 'backend="cpu:gloo,cuda:nccl"', "", [(7, "FSDP301")]),
    ('torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))', '"nccl"', "", []),
    ("torch.accelerator.set_device_index(local_rank)", '"nccl"', "", []),
    ("", '"nccl", device_id=torch.device("cuda", local_rank)', "", []),
    ("", '"nccl"', 'mesh = init_device_mesh("cuda", (8,))', []),
    ("", '"nccl"', "model = Net().cuda(local_rank)", []),
    ("", '"nccl"', 'device = torch.device("cuda", args.local_rank)', []),
    ("", '"nccl"', 'x = x.to(f"cuda:{local_rank}")', []),
    ('os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["LOCAL_RANK"]', '"nccl"', "", []),
    ("device = utils.get_device('cuda')", '"nccl"', "", []),
    ("", '"nccl", world_size=1, rank=0', "", []),
    ("", '"gloo"', "", []),
    ("", "backend=args.backend", "", []),
])
def test_a_device_chosen_per_process(before, backend, after, expected):
    assert codes(NCCL_SCRIPT.format(before=before, backend=backend, after=after)) == expected


def test_only_whole_scripts_are_checked_for_a_device_and_for_destroy():
    # A library function: its callers, which fsdplint cannot see, may choose the device and destroy.
    assert codes("""
    import torch.distributed as dist
    def init_distributed():
        dist.init_process_group("nccl")
    """) == []
    # A function started by torch.multiprocessing.spawn is a whole script.
    assert codes("""
    import torch.distributed as dist
    import torch.multiprocessing as mp
    def worker(rank, world_size):
        dist.init_process_group("nccl", rank=rank, world_size=world_size)
    if __name__ == "__main__":
        mp.spawn(worker, args=(2,), nprocs=2)
    """) == [(5, "FSDP301"), (5, "FSDP304")]


@pytest.mark.parametrize("ending", [
    "dist.destroy_process_group()",
    "cleanup()",
    "atexit.register(dist.destroy_process_group)",
    "trainer.close()",
])
def test_ways_to_destroy_the_group(ending):
    assert codes(f"""
    import atexit
    import torch
    import torch.distributed as dist
    def cleanup():
        dist.destroy_process_group()
    class Trainer:
        def close(self):
            cleanup()
    torch.cuda.set_device(0)
    dist.init_process_group("nccl")
    {ending}
    """) == []


def test_a_group_never_destroyed():
    assert codes("""
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(0)
    dist.destroy_process_group()
    dist.init_process_group()
    dist.init_process_group("gloo")
    """) == [(6, "FSDP304")]


@pytest.mark.parametrize("statement, expected", [
    ("torch.accelerator.device_index(local_rank)", "torch.accelerator.set_device_index(local_rank)"),
    ("torch.cuda.device(local_rank)", "torch.cuda.set_device(local_rank)"),
    ("device_index(local_rank)", "set_device_index(local_rank)"),
])
def test_device_context_as_statement(statement, expected):
    source = f"""
    import torch
    from torch.accelerator import device_index
    {statement}
    with torch.accelerator.device_index(local_rank):
        pass
    ctx = torch.cuda.device(local_rank)
    """
    assert codes(source) == [(4, "FSDP305")]
    result = fixed(source, "FSDP305")
    assert expected in result.splitlines()
    if statement.startswith("device_index"):
        assert "from torch.accelerator import device_index, set_device_index" in result.splitlines()
