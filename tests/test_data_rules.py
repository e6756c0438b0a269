"""Uneven loops and data loading, through FSDP308, FSDP310 and FSDP311: the shapes real code takes and
the near-misses that stay silent."""

from __future__ import annotations

import textwrap

import pytest

from fsdplint.api import check_source, fix_source

HEADER = """
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
"""


def lines(source: str, select: str) -> list[int]:
    text = textwrap.dedent(HEADER) + textwrap.dedent(source)
    offset = textwrap.dedent(HEADER).count("\n")
    return [d.line - offset for d in check_source(text, select=[select])]


def severities(source: str, select: str) -> list[str]:
    text = textwrap.dedent(HEADER) + textwrap.dedent(source)
    return [getattr(d.severity, "value", d.severity) for d in check_source(text, select=[select])]


def test_uneven_loops_through_a_helper_and_the_even_shapes():
    source = """
    def steps(model, batches, extra):
        for x in range(len(batches) + extra):
            model(batches[0])

    def main(model, batches, n):
        rank, world = dist.get_rank(), dist.get_world_size()
        fully_shard(model)
        steps(model, batches, rank)
        for x in batches[rank * n:(rank + 1) * n]:
            model(x)
        for x in batches[rank::world]:
            print(x)
        for x in batches[rank::world]:
            dist.all_reduce(x, group=pair)
        for i in range(rank, len(batches), world):
            dist.all_reduce(batches[i])
    """
    assert lines(source, "FSDP308") == [3, 16]
    assert severities(source, "FSDP308") == ["error", "warning"]


def test_data_not_split_and_where_the_split_may_be_out_of_sight():
    source = """
    def train(model, data, dataset, accelerator, world_size):
        model = DDP(model)
        loader = DataLoader(TensorDataset(data), batch_size=8)
        for x in loader:
            model(x).sum().backward()
        evaluated = DataLoader(TensorDataset(data), batch_size=8)
        for x in evaluated:
            model(x)
        unknown = DataLoader(dataset, batch_size=8)
        for x in unknown:
            model(x).sum().backward()
        per_rank = DataLoader(TensorDataset(data), batch_size=64 // world_size)
        for x in per_rank:
            model(x).sum().backward()
        prepared = DataLoader(TensorDataset(data), batch_size=8)
        prepared = accelerator.prepare(prepared)
        for x in prepared:
            model(x).sum().backward()
    """
    assert lines(source, "FSDP310") == [4]


@pytest.mark.parametrize("wrapped, expected", [
    # PursuitOfDataScience/ArgonneAI's sft.py (a judge's false warning): the loader with no sampler is
    # built where `ddp_on` is false, the model wrapped where it is true: they never run together.
    ("if ddp_on:\n            model = DDP(model)", []),
    # Near misses: a wrap on every path, and one under another test.
    ("model = DDP(model)", [7]),
    ("if use_ddp:\n            model = DDP(model)", [7]),
])
def test_a_loader_with_no_sampler_in_an_arm_the_wrap_excludes_is_not_reported(wrapped, expected):
    source = f"""
    def train(model, data, world_size, use_ddp):
        ddp_on = world_size > 1
        if ddp_on:
            loader = DataLoader(TensorDataset(data), sampler=DistributedSampler(TensorDataset(data)))
        else:
            loader = DataLoader(TensorDataset(data), batch_size=8)
        {wrapped}
        for x in loader:
            model(x).sum().backward()
    """
    assert lines(source, "FSDP310") == expected


def test_shuffled_by_a_seed_of_the_rank_is_not_reported():
    source = """
    def train(model, data):
        fully_shard(model)
        torch.manual_seed(1234 + dist.get_rank())
        loader = DataLoader(TensorDataset(data), batch_size=8, shuffle=True)
        for x in loader:
            model(x).sum().backward()
    """
    assert lines(source, "FSDP310") == []
    assert lines(source.replace("1234 + dist.get_rank()", "1234"), "FSDP310") == [5]


def test_a_shuffle_never_seeded_differs_between_ranks():
    """fal-ai-community/video-diffusion-speedrun: `shuffle=True` and torch never seeded (numpy's seed
    leaves torch's generator alone): each process draws its own order, not the same batches."""
    source = """
    import numpy as np
    from accelerate.utils import set_seed

    def train(model, data):
        fully_shard(model)
        {seed}
        loader = DataLoader(TensorDataset(data), batch_size=8, shuffle=True)
        for x in loader:
            model(x).sum().backward()
    """
    assert lines(source.format(seed="pass"), "FSDP310") == []
    assert lines(source.format(seed="np.random.seed(0)"), "FSDP310") == []
    assert lines(source.format(seed="torch.manual_seed(args.seed)"), "FSDP310") == [8]
    assert lines(source.format(seed="set_seed(args.seed)"), "FSDP310") == [8]
    assert lines(source.format(seed="set_seed(args.seed, device_specific=True)"), "FSDP310") == []
    assert lines(source.replace("shuffle=True", "shuffle=False").format(seed="pass"), "FSDP310") == [8]


def test_sampler_epoch_forms():
    source = """
    def train(model, dataset, trainer, use_dist):
        fully_shard(model)
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, sampler=sampler)
        for epoch in range(3):
            loader.sampler.set_epoch(epoch)
            for x in loader:
                model(x)
        for epoch in range(3):
            trainer.run_epoch(loader)
        step = 0
        while step < 10:
            for x in enumerate(loader):
                step += 1
        still = DataLoader(dataset, sampler=DistributedSampler(dataset, shuffle=False))
        for epoch in range(3):
            for x in still:
                model(x)
    """
    assert lines(source, "FSDP311") == [13]
    text = textwrap.dedent(HEADER) + textwrap.dedent(source)
    assert fix_source(text, select=["FSDP311"]) == text  # a `while` loop has no variable for the epoch


@pytest.mark.parametrize("first, iterated, expected", [
    # SaltyPeppermint/toothless: a copy of the loader each epoch holds a copy of its sampler, at the
    # epoch the original's is at (never set: 0).
    ("pass", "copy.deepcopy(loader)", [7]),
    ("pass", "copy.copy(loader)", [7]),
    # aruncs2005/llama2-70b-finetuning: a progress bar around the loader, `enumerate(tqdm(train_dataloader))`.
    ("pass", "enumerate(tqdm(loader, disable=True))", [7]),
    ("pass", "tqdm(enumerate(loader))", [7]),
    # Near misses: the original's epoch set first, which the copy then holds; the epoch set first.
    ("loader.sampler.set_epoch(epoch)", "copy.deepcopy(loader)", []),
    ("sampler.set_epoch(epoch)", "enumerate(tqdm(loader))", []),
])
def test_a_copy_of_the_loader_or_a_progress_bar_iterates_as_the_loader_does(first, iterated, expected):
    source = f"""
    import copy
    from tqdm import tqdm
    def train(model, dataset):
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, sampler=sampler)
        for epoch in range(3):
            {first}
            for x in {iterated}:
                model(x).sum().backward()
    """
    assert lines(source, "FSDP311") == expected


@pytest.mark.parametrize("handed, expected", [
    # SaltyPeppermint/toothless: `train(rank, model, copy.deepcopy(train_dataloader), optimizer)` in
    # each epoch; the helper iterates its parameter.
    ("copy.deepcopy(loader)", [9]),
    # Near misses: a copy of a loader whose sampler does not shuffle; the original's epoch set first.
    ("copy.deepcopy(ordered)", []),
    ("(loader.sampler.set_epoch(epoch), copy.deepcopy(loader))[1]", []),
])
def test_a_copy_of_the_loader_handed_to_a_function_iterates_as_the_loader_does(handed, expected):
    source = f"""
    import copy
    def run(model, loader):
        for x in loader:
            model(x).sum().backward()
    def train(model, dataset):
        loader = DataLoader(dataset, sampler=DistributedSampler(dataset))
        ordered = DataLoader(dataset, sampler=DistributedSampler(dataset, shuffle=False))
        for epoch in range(3):
            run(model, {handed})
    """
    assert lines(source, "FSDP311") == expected


def test_an_evaluation_loop_under_no_grad_needs_no_new_order():
    # bionemo-framework: the validation loader is iterated under `torch.no_grad()` in every epoch.
    source = """
    def train(model, dataset, val_dataset):
        fully_shard(model)
        val_loader = DataLoader(val_dataset, sampler=DistributedSampler(val_dataset))
        for epoch in range(3):
            model.train()
            with {context}:
                for x in val_loader:
                    model(x)
    """
    assert lines(source.format(context="torch.no_grad()"), "FSDP311") == []
    assert lines(source.format(context="torch.inference_mode()"), "FSDP311") == []
    assert lines(source.format(context="torch.autocast('cuda')"), "FSDP311") == [5]


@pytest.mark.parametrize("decorator, expected", [
    # Niccolo-Ajroldi/plainLM: the validation loader, built by a helper that picks the sampler in an
    # if/else, is iterated only in a function decorated `@torch.no_grad()`.
    ("@torch.no_grad()", []),
    # Near miss: an undecorated function trains on the batches: the epoch loop is reported.
    ("", [14]),
])
def test_an_evaluation_loop_in_a_function_decorated_no_grad_needs_no_new_order(decorator, expected):
    source = f"""
    def get_loader(dataset):
        if dist.is_initialized():
            sampler = DistributedSampler(dataset)
        else:
            sampler = None
        return DataLoader(dataset, sampler=sampler)
    {decorator}
    def evaluate(model, loader):
        for batch in loader:
            model(batch).sum().backward()
    def main(model, dataset):
        loader = get_loader(dataset)
        for step in range(3):
            evaluate(model, loader)
    """
    assert lines(source, "FSDP311") == expected


@pytest.mark.parametrize("bound", [
    "    if use_dist:\n        sampler = DistributedSampler(dataset)\n    else:\n        sampler = torch.utils.data.RandomSampler(dataset)\n",
    "    if use_dist:\n        sampler = DistributedSampler(dataset)\n    else:\n        sampler = None\n",
    # HamidShojanazeri/LLM_fine_tuning: None first, the sampler on some paths, no `else` (missed before)
    "    sampler = None\n    if use_dist:\n        sampler = DistributedSampler(dataset)\n",
])
def test_sampler_epoch_fix_guards_a_variable_that_may_hold_another_sampler(bound):
    """On another path the variable holds a `RandomSampler`, or None (a script that starts no group,
    `if distributed:`): neither has `set_epoch`, so the fix calls it only where the variable has it.
    On the paths that built the sampler, the loader iterates it: the finding holds there."""
    text = textwrap.dedent(HEADER) + "def train(model, dataset, use_dist):\n    fully_shard(model)\n" + bound + \
        "    loader = DataLoader(dataset, sampler=sampler)\n    for epoch in range(3):\n        for x in loader:\n            model(x)\n"
    epochs = text.splitlines().index("    for epoch in range(3):") + 1
    assert [d.line for d in check_source(text, select=["FSDP311"])] == [epochs]
    guarded = '    for epoch in range(3):\n        if hasattr(sampler, "set_epoch"):\n            sampler.set_epoch(epoch)\n        for x in loader:'
    assert guarded in fix_source(text, select=["FSDP311"])
    # Near misses: built on every path, the variable holds only it: the call alone; a loader given
    # another variable iterates no sampler of these.
    single = text.replace(bound, "    sampler = DistributedSampler(dataset)\n")
    assert "    for epoch in range(3):\n        sampler.set_epoch(epoch)\n        for x in loader:" in fix_source(single, select=["FSDP311"])
    assert check_source(text.replace("sampler=sampler)", "sampler=None)"), select=["FSDP311"]) == []


def test_an_epoch_loop_the_call_makes_run_once_needs_no_new_order():
    # gameofdimension/tiny-grpo: `for iteration in range(num_iterations)` with `num_iterations=1` passed.
    source = """
    def train(loader, num_iterations):
        for iteration in range(num_iterations):
            for batch in loader:
                step(batch)

    def main(dataset, flag):
        loader = DataLoader(dataset, sampler=DistributedSampler(dataset, shuffle={shuffle}))
        train(loader, num_iterations={count})
    """
    assert lines(source.format(count=1, shuffle="True"), "FSDP311") == []
    assert lines(source.format(count=3, shuffle="True"), "FSDP311") == [3]
    assert lines(source.format(count=3, shuffle="flag"), "FSDP311") == []  # not known to shuffle


def test_a_loop_over_a_rank_part_reaches_no_collective_that_runs_only_for_sharded_modules():
    """physicsnemo's inference loop over `runs[rank::world_size]` calls `load_checkpoint`, whose
    collectives run `if is_distributed:` (any of the models an FSDP module), here of a model the run
    cannot see: not known to run. Near miss: a barrier in the loop itself."""
    source = """
    from torch.distributed.fsdp import FSDPModule

    def load(models):
        is_distributed = any(isinstance(m, FSDPModule) for m in models)
        if is_distributed:
            dist.barrier()

    def main(runs, model):
        rank, world = dist.get_rank(), dist.get_world_size()
        for run in runs[rank::world]:
            load([model])
        for run in runs[rank::world]:
            dist.barrier()
    """
    assert lines(source, "FSDP308") == [13]


def test_a_sampler_built_only_where_a_rank_the_callers_leave_at_minus_one_is_given():
    """sparseml: `sampler = DistributedSampler(ds) if rank != -1 and training else None` with every
    caller leaving `rank=-1`: there is no sampler, and the `while True` loop re-reading the loader
    shuffles nothing. Near miss: a caller that passes the rank."""
    source = """
    def loader_of(dataset, training, rank=-1):
        sampler = DistributedSampler(dataset) if rank != -1 and training else None
        return DataLoader(dataset, batch_size=4, sampler=sampler)

    def forever(loader):
        while True:
            for batch in loader:
                yield batch

    def main(dataset):
        dist.init_process_group("gloo")
        loader = loader_of(dataset, training=True{rank})
        batches = forever(loader)
        for _ in range(8):
            next(batches)
    """
    assert lines(source.format(rank=""), "FSDP311") == []
    assert lines(source.format(rank=", rank=dist.get_rank()"), "FSDP311") == [7]


@pytest.mark.parametrize("cuda_kwargs, expected", [
    ('{"num_workers": 2, "pin_memory": True}', [12]),  # what the dict takes in is known: the sampler stays in it
    ("settings.loader_kwargs", []),  # near miss: a dict the model does not know may replace the sampler
])
def test_a_sampler_given_through_a_dict_updated_before_the_loader(cuda_kwargs, expected):
    """PyTorch's FSDP example: `train_kwargs = {"sampler": sampler1}; train_kwargs.update(cuda_kwargs);
    DataLoader(dataset1, **train_kwargs)`, iterated in an epoch loop without `set_epoch`."""
    source = f"""
    def train(model, loader):
        for x in loader:
            model(x).sum().backward()

    def main(model, dataset, settings):
        sampler = DistributedSampler(dataset, rank=dist.get_rank(), shuffle=True)
        train_kwargs = {{"batch_size": 8, "sampler": sampler}}
        cuda_kwargs = {cuda_kwargs}
        train_kwargs.update(cuda_kwargs)
        loader = DataLoader(dataset, **train_kwargs)
        for epoch in range(10):
            train(model, loader)
    """
    assert lines(source, "FSDP311") == expected


@pytest.mark.parametrize("world_size, expected", [
    ("1", []),  # a group of one process: no other rank trains on the same batches
    ("size", []),  # ... through a name that only ever holds 1
    ("2", [7]),  # near miss: two processes, each on all the data
    ("int(os.environ['WORLD_SIZE'])", [7]),  # near miss: the launcher's count
])
def test_a_process_group_of_one_process_splits_nothing(world_size, expected):
    """saissd/Distributed-ML-Training-Inference-Optimization: `init_process_group(..., rank=0,
    world_size=1)`, then the FSDP1 wrap and a loader with no sampler."""
    source = f"""
    import os
    def train(model, data):
        size = 1
        dist.init_process_group("gloo", rank=0, world_size={world_size})
        model = DDP(model)
        loader = DataLoader(TensorDataset(data), batch_size=8)
        for x in loader:
            model(x).sum().backward()
    """
    assert lines(source, "FSDP310") == expected
