"""FSDP306 (a backend that cannot serve the tensor's device) and FSDP307 (a call before the process group
exists) on the shapes real scripts take, beyond their fixtures: what fsdplint knows, and where it stays silent."""

from __future__ import annotations

import textwrap

import pytest

from fsdplint.api import check_paths, check_source, fix_source


def codes(source: str, select=("FSDP306", "FSDP307")) -> list[tuple[int, str]]:
    return [(d.line, d.code) for d in check_source(textwrap.dedent(source), select=list(select))]


SCRIPT = """
import torch
import torch.distributed as dist
{body}

if __name__ == "__main__":
    main()
"""


def script(body: str) -> str:
    return SCRIPT.format(body=textwrap.dedent(body))


def test_the_rank_read_at_the_top_before_main_starts_the_group():
    assert codes(script("""
    RANK = dist.get_rank()

    def main():
        dist.init_process_group("nccl")
    """)) == [(5, "FSDP307")]


def test_a_call_in_main_before_the_init_it_makes_is_reported_through_the_call():
    found = check_source(textwrap.dedent(script("""
    def setup():
        world = dist.get_world_size()
        dist.init_process_group("gloo")
        return world

    def main():
        setup()
    """)), select=["FSDP307"])
    assert [(d.line, d.code) for d in found] == [(6, "FSDP307")]
    assert "via <module> → main → setup" in found[0].message


@pytest.mark.parametrize("before", [
    "dist.init_process_group('nccl')",
    "init_device_mesh('cuda', (2,))",
    "fully_shard(torch.nn.Linear(2, 2))",  # its default mesh starts the group
    "accelerator = Accelerator()",  # a library may start it
    "deepspeed.init_distributed()",
    "setup_distributed()",  # a function fsdplint cannot see
    "ok = dist.is_initialized()",
])
def test_anything_that_may_start_the_group_first_silences(before):
    assert codes(f"""
    import torch
    import torch.distributed as dist
    import deepspeed
    from accelerate import Accelerator
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from mylib import setup_distributed

    {before}
    RANK = dist.get_rank()

    def main():
        pass

    if __name__ == "__main__":
        main()
    """) == []


@pytest.mark.parametrize("guarded", [
    "RANK = dist.get_rank() if dist.is_initialized() else 0",
    "RANK = dist.is_initialized() and dist.get_rank()",
    "try:\n    RANK = dist.get_rank()\nexcept ValueError:\n    RANK = 0",
])
def test_a_call_that_asks_or_handles_first_is_not_reported(guarded):
    assert codes(script(guarded + "\n\ndef main():\n    pass\n")) == []


def test_modules_that_are_imported_are_not_scripts(tmp_path):
    (tmp_path / "utils.py").write_text("import torch.distributed as dist\nRANK = dist.get_rank()\n")
    (tmp_path / "train.py").write_text(textwrap.dedent(script("""
    import utils

    def main():
        dist.init_process_group("nccl")
        print(utils.RANK)
    """)))
    assert [d.code for d in check_paths([tmp_path], select=["FSDP307"])] == []


def test_a_spawned_function_that_reads_the_rank_first():
    assert codes("""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    def worker(index, world):
        rank = dist.get_rank()
        dist.init_process_group("gloo", rank=index, world_size=world)

    if __name__ == "__main__":
        mp.spawn(worker, args=(2,), nprocs=2)
    """) == [(6, "FSDP307")]


NCCL = """
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
dist.init_process_group({backend})
{body}
"""


def nccl(body: str, backend: str = '"nccl"') -> str:
    return NCCL.format(backend=backend, body=textwrap.dedent(body))


@pytest.mark.parametrize("made", [
    'torch.zeros(2, device="cpu")', "torch.ones(2, device=torch.device('cpu'))", "loss.detach().cpu()", 'x.to("cpu")',
])
def test_a_tensor_made_on_the_cpu_in_an_nccl_group(made):
    assert codes(nccl(f"t = {made}\ndist.all_reduce(t)\n")) == [(7, "FSDP306")]


@pytest.mark.parametrize("backend", ['"cpu:gloo,cuda:nccl"', "", '"gloo"', "backend", 'backend="nccl" if cuda else "gloo"'])
def test_a_backend_for_the_cpu_or_one_not_known_is_silent(backend):
    assert codes(nccl('t = torch.zeros(2, device="cpu")\ndist.all_reduce(t)\nmesh = init_device_mesh("cpu", (2,))\n', backend)) == []


@pytest.mark.parametrize("body", [
    "t = torch.zeros(2)\ndist.all_reduce(t)",  # the default device: not known
    't = torch.zeros(2, device="cpu").cuda()\ndist.all_reduce(t)',
    't = torch.zeros(2, device="cpu")\nt = t.to(device)\ndist.all_reduce(t)',
    't = torch.zeros(2, device="cpu")\ndist.all_reduce(t, group=gloo_group)',
    'objects = [None, None]\ndist.all_gather_object(objects, {"a": 1})',
    't = torch.zeros(2, device=device)\ndist.all_reduce(t)',
])
def test_a_device_not_known_to_be_the_cpu_is_silent(body):
    assert codes(nccl(body)) == []


def test_a_group_started_again_with_gloo_is_silent():
    assert codes(nccl('dist.destroy_process_group()\ndist.init_process_group("gloo")\nt = torch.zeros(2, device="cpu")\ndist.all_reduce(t)\n')) == []


def test_the_fix_makes_the_tensor_and_the_mesh_on_cuda():
    source = nccl('mesh = init_device_mesh("cpu", (2,))\nt = torch.zeros(2, device="cpu")\nu = x.cpu()\ndist.all_reduce(t)\ndist.broadcast(u, 0)\n')
    assert codes(source) == [(6, "FSDP306"), (9, "FSDP306"), (10, "FSDP306")]
    fixed = fix_source(textwrap.dedent(source), select=["FSDP306"], unsafe_fixes=True)
    assert 'init_device_mesh("cuda", (2,))' in fixed and 'torch.zeros(2, device="cuda")' in fixed and "u = x.cuda()" in fixed
