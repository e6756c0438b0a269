"""The semantic model through the rules that read it: names, aliases, calls followed across functions and files."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fsdplint.api import check_paths, check_source


def codes(source: str, select: list[str] | None = None) -> list[tuple[int, str]]:
    return [(d.line, d.code) for d in check_source(textwrap.dedent(source), select=select)]


def test_import_aliases_resolve():
    for header, call in [
        ("from torch.distributed.fsdp import fully_shard", "fully_shard"),
        ("from torch.distributed._composable.fsdp import fully_shard as shard", "shard"),
        ("import torch.distributed.fsdp as fsdp", "fsdp.fully_shard"),
        ("import torch.distributed.fsdp", "torch.distributed.fsdp.fully_shard"),
    ]:
        source = f"""
        {header}
        model = Net()
        for block in model.layers:
            {call}(block)
        {call}(model)
        model.forward(x)
        """
        assert codes(source) == [(7, "FSDP103")], header


def test_a_local_function_named_fully_shard_is_not_fsdp():
    assert codes("""
    def fully_shard(module):
        return module
    model = fully_shard(Net())
    model.forward(x)
    """) == []


def test_flow_follows_two_calls_and_methods():
    assert codes("""
    from torch.distributed.fsdp import fully_shard

    def shard_blocks(model):
        for block in model.layers:
            fully_shard(block)

    def shard(model):
        shard_blocks(model)
        fully_shard(model)

    class Trainer:
        def setup(self):
            self.model = Net()
            shard(self.model)

        def step(self, batch):
            return self.model.forward(batch)
    """) == [(18, "FSDP103")]


def test_unknown_provenance_is_not_judged():
    # `model` is a parameter and nothing in the run calls `wrap`: its blocks may be sharded by the caller.
    assert codes("""
    from torch.distributed.fsdp import fully_shard

    def wrap(model):
        fully_shard(model)
        return model
    """) == []


def test_cross_file_flow_and_caller_without_trigger_token(tmp_path: Path):
    (tmp_path / "parallel.py").write_text(textwrap.dedent("""
        from torch.distributed.fsdp import fully_shard

        def parallelize(model):
            for block in model.layers:
                fully_shard(block)
            fully_shard(model)
            return model
    """))
    (tmp_path / "train.py").write_text(textwrap.dedent("""
        import torch
        from parallel import parallelize

        def main():
            model = Net()
            optimizer = torch.optim.AdamW(model.parameters())
            model = parallelize(model)
            loss = model.forward(batch)
    """))
    found = sorted((Path(d.path).name, d.line, d.code) for d in check_paths([tmp_path]))
    assert found == [("train.py", 7, "FSDP104"), ("train.py", 9, "FSDP103")]


def test_a_method_inherited_from_a_class_of_another_file_is_walked(tmp_path: Path):
    """cosmos-rl: `net.fully_shard(mesh)` is defined by the base class, in another module, and shards
    every block before the root is; the base file defines no function, only the class."""
    (tmp_path / "base.py").write_text(textwrap.dedent("""
        from torch import nn
        from torch.distributed.fsdp import fully_shard

        class Base(nn.Module):
            def shard_blocks(self, mesh):
                for block in self.blocks:
                    fully_shard(block, mesh=mesh)
    """))
    build = textwrap.dedent("""
        from torch.distributed.fsdp import fully_shard
        from base import Base

        class Net(Base):
            pass

        def build(mesh, x):
            net = Net()
            {call}
            fully_shard(net, mesh=mesh)
            net(x).sum().backward()
    """)
    for call, expected in [("net.shard_blocks(mesh)", []), ("pass", [("build.py", 11, "FSDP101")])]:
        (tmp_path / "build.py").write_text(build.format(call=call))
        assert sorted((Path(d.path).name, d.line, d.code) for d in check_paths([tmp_path])) == expected, call


def test_near_misses_stay_silent():
    assert codes("""
    import torch
    from torch.distributed.fsdp import fully_shard

    class Block(torch.nn.Module):
        def forward(self, x):
            return super().forward(x)

    def main(accelerator):
        model = Net()
        optimizer = torch.optim.AdamW(model.parameters())
        for block in model.layers:
            fully_shard(block)
        fully_shard([model.embed, model.head])
        fully_shard(model)
        model, optimizer = accelerator.prepare(model, optimizer)
        unsharded = Net()
        unsharded.forward(x)
        for step in range(4):
            loss = model(x)
            model.set_requires_gradient_sync(step == 3)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
    """) == []


def test_a_layer_moved_to_a_device_is_still_that_layer():
    # `nn.Linear(...).to(device)`: a single layer has nothing inside to shard first, so no FSDP101;
    # a model built the same way does.
    assert codes("""
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard
    probe = nn.Linear(16, 1).to(device)
    fully_shard(probe)
    model = Net().to(device)
    fully_shard(model)
    """) == [(7, "FSDP101")]
    # Transformer Engine's fused layers are single layers too, built on the meta device or not; its
    # TransformerLayer is a block.
    assert codes("""
    import transformer_engine.pytorch as te
    from torch.distributed.fsdp import fully_shard
    layer = te.LayerNormLinear(512, 1536, device="meta")
    fully_shard(layer)
    block = te.TransformerLayer(512, 2048, 8)
    fully_shard(block)
    """) == [(7, "FSDP101")]


def test_a_class_that_builds_only_a_parameter_holds_no_blocks():
    """tang0389/himuon's test worker: `self.bank = nn.Parameter(init.clone())` is its `__init__`: a
    tensor, no module to shard first. Near miss: the parameter made by a method of the object, which
    may register a module on it."""
    source = """
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    class Bank(nn.Module):
        def __init__(self, init):
            super().__init__()
            self.bank = nn.Parameter({made})

    def main(init):
        model = Bank(init)
        fully_shard(model)
    """
    assert codes(source.format(made="init.clone()"), ["FSDP101"]) == []
    assert codes(source.format(made="self.make(init)"), ["FSDP101"]) == [(12, "FSDP101")]


def test_noqa_suppresses_and_unused_noqa_is_reported():
    assert codes("""
    from torch.distributed.fsdp import fully_shard
    model = Net()
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    model.forward(x)  # noqa: FSDP103
    model(x)  # noqa: FSDP103
    """) == [(8, "FSDP003")]


def test_blocks_sharded_but_not_the_root_matter_only_where_the_root_is_trained():
    """VeOmni's test_chunk_mbs: one layer of a container is sharded and run alone; the container's own
    parameters are never trained, so none goes unreduced. Its forward, or an optimizer over its
    parameters, trains them."""
    source = """
    import torch
    from torch.distributed.fsdp import fully_shard

    def main(x):
        root = Root()
        layer = root.layers[0]
        fully_shard(layer)
        {use}
    """
    assert codes(source.format(use="layer(x).sum().backward()"), select=["FSDP102"]) == []
    for use in ("root(x).sum().backward()", "root.forward(x)", "optimizer = torch.optim.AdamW(root.parameters())"):
        assert codes(source.format(use=use), select=["FSDP102"]) == [(8, "FSDP102")], use


def test_a_composite_of_modules_each_sharded_holds_nothing_of_its_own():
    """Automodel's composite of a base model and a drafter, each sharded: the root's class gives `self`
    only those two, a float and a builtin's scalar, so no parameter is left unreduced; a mixin of the
    run that holds nothing adds none. A parameter, an unsharded child, a mixin with state or a base class
    the run cannot read may be."""
    source = """
    import torch
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    class CheckpointingMixin:
        def save(self, path):
            torch.save(self.state_dict(), path)

    class StatefulMixin:
        def setup(self):
            self.head = nn.Linear(8, 2)

    class Composite({base}):
        def __init__(self, base, drafter, steps):
            super().__init__()
            self.base = base
            self.drafter = drafter
            self.loss_weight = 0.5
            self.steps = int(steps)
            {more}

    def main(x):
        composite = Composite(nn.Linear(8, 8), nn.Linear(8, 8), 1).cuda()
        fully_shard(composite.base)
        fully_shard(composite.drafter)
        composite(x).sum().backward()
    """
    def severities(base: str, more: str = "", make: str = "Composite") -> list[tuple[int, str]]:
        program = source.format(base=base, more=more).replace("composite = Composite(", f"composite = {make}(")
        return [(d.line, str(d.severity)) for d in check_source(textwrap.dedent(program), select=["FSDP102"])]

    for base in ("nn.Module", "nn.Module, CheckpointingMixin"):
        assert severities(base) == [], base
    for base, more in [("nn.Module", "self.scale = nn.Parameter(torch.ones(1))"), ("nn.Module", "self.head = nn.Linear(8, 2)"),
                       ("nn.Module", "self.head = make_head(8)"), ("nn.Module", 'setattr(self, "head", nn.Linear(8, 2))'),
                       ("nn.Module, StatefulMixin", "")]:
        assert severities(base, more) == [(26, "error")], (base, more)
    # What a class the run cannot read holds is unknown: a warning, which says so.
    assert severities("PreTrainedModel") == severities("nn.Module, LibraryMixin") == [(26, "warning")]
    assert severities("nn.Module", make="library.Composite") == [(26, "warning")]


@pytest.mark.parametrize("given, moved, expected", [
    # swarajnanda2021/Dinov2_modified: the student holds three modules its caller gives it, each
    # sharded, and two numbers (a literal default, a literal argument); moved to the GPU and its batch
    # norms converted, each giving back the same module.
    ("", ["student = student.cuda()", "student = nn.SyncBatchNorm.convert_sync_batchnorm(student)"], []),
    (", patch_size=14", [], []),
    # Near misses: a module given where a number was, and a module given back by code the run cannot read.
    (", patch_size=nn.Linear(2, 2)", [], ["error"]),
    ("", ["student = library.wrap(student)"], ["warning"]),
    # The real call gives `num_masks=args.num_masks`: a value that may be anything, named in a warning.
    (", num_masks=args.num_masks", [], ["warning"]),
])
def test_a_composite_given_its_modules_and_numbers_holds_nothing_of_its_own(given, moved, expected):
    source = """
    import torch.nn as nn
    import library
    from torch.distributed.fsdp import fully_shard

    class Combined(nn.Module):
        def __init__(self, backbone, classhead, patchhead, num_masks=6, patch_size=16):
            super().__init__()
            self.backbone = backbone
            self.classhead = classhead
            self.patchhead = patchhead
            self.num_masks = num_masks
            self.patch_size = patch_size

    class Backbone(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])

    def shard(student):
        for block in student.backbone.blocks:
            fully_shard(block)
        fully_shard(student.backbone)
        fully_shard(student.classhead)
        fully_shard(student.patchhead)
        return student

    def main(x, args):
        student = Combined(Backbone(), nn.Linear(8, 4), nn.Linear(8, 4)GIVEN)
        MOVED
        student = shard(student)
        student(x).sum().backward()
    """.replace("GIVEN", given).replace("MOVED", "\n        ".join(moved) or "pass")
    found = [(d.line, str(d.severity)) for d in check_source(textwrap.dedent(source), select=["FSDP102"])]
    assert found == [(25, severity) for severity in expected]  # at the last block sharded
    if "args" in given:
        [finding] = check_source(textwrap.dedent(source), select=["FSDP102"])
        assert "if `student.num_masks`, given to its constructor, holds parameters" in finding.message


def test_one_line_function_bodies():
    """Found by the fuzzer: `def f(): ...` on one line crashed the model (IndexError). Its events are
    held by the def; no fix places code around the def, where it would run outside the function."""
    from fsdplint.api import fix_source

    source = textwrap.dedent("""\
    import torch
    from torch.distributed.fsdp import fully_shard
    def top_down(model): fully_shard(model); fully_shard(model.layers[0])
    def run(model, x): fully_shard(model); return model.forward(x)
    def blocks_only(): model = Net(); fully_shard(model.layers[0]); fully_shard(model.layers[1]); model(1)
    def reshard(model, x): fully_shard(model); model(x); opt = torch.optim.AdamW(model.parameters())
    """)
    assert codes(source) == [(3, "FSDP102"), (4, "FSDP103"), (5, "FSDP102"), (6, "FSDP108")]
    assert fix_source(source, unsafe_fixes=True) == source.replace("model.forward(x)", "model(x)")


def test_comprehension_target_is_an_element_of_what_it_iterates():
    """`[fully_shard(b) for b in model.layers]` shards sub-modules of `model`, as the `for` loop does
    (it was read as sharding an unknown `b` alone: FSDP101 twice)."""
    sharded = """
    from torch.distributed.fsdp import fully_shard
    model = Net()
    [fully_shard(b) for b in model.layers]
    fully_shard(model)
    loss = model(batch)
    """
    assert codes(sharded) == []
    assert codes(sharded.replace("    fully_shard(model)\n", "")) == [(4, "FSDP102")]


def test_a_method_of_an_instance_built_here_is_still_a_method_call():
    # `model.forward(x)` on `model = Transformer()` is followed into Transformer.forward, and is
    # still the direct forward call that skips FSDP's hooks.
    assert codes("""
        import torch.nn as nn
        from torch.distributed.fsdp import fully_shard

        class Transformer(nn.Module):
            def forward(self, x):
                return self.head(x)

        def main():
            model = Transformer()
            for block in model.layers:
                fully_shard(block)
            fully_shard(model)
            return model.forward(x)
        """, ["FSDP103"]) == [(14, "FSDP103")]


def test_modules_taken_from_a_model_sharded_after_them_are_its_units():
    """accelerate's fsdp2_prepare_model: a loop over a helper's list of the model's children, and an
    embedding fetched through `getattr(model, ...)()`, are shards of the model it then shards whole
    (FSDP101 fired on both); a model sharded alone still is reported."""
    assert codes("""
    from torch.distributed.fsdp import fully_shard

    def children_bottom_up(model):
        ordered = []
        stack = [model]
        while stack:
            current = stack.pop()
            stack.extend(current.children())
            ordered.append(current)
        return ordered[::-1]

    def prepare(model, policy):
        for module in children_bottom_up(model)[:-1]:
            if policy(module):
                fully_shard(module)
        embed = getattr(model, "get_input_embeddings", lambda: None)()
        fully_shard(embed)
        fully_shard(model)

    def main(policy):
        prepare(Net(), policy)
        alone = Net()
        fully_shard(alone)
    """) == [(24, "FSDP101")]
    # A model rebuilt from itself (`model = parallelize_module(model, ...)`) is not its own sub-module.
    assert codes("""
    from torch.distributed.fsdp import fully_shard
    model = Net()
    model = parallelize_module(model, tp_mesh, plan)
    fully_shard(model, mesh=dp_mesh)
    """) == [(5, "FSDP101")]


@pytest.mark.parametrize("applied, expected", [
    ("shard_blocks", []),
    # Near misses: a function that shards nothing, a method (its object is not known), a name of no
    # function of the run: the root is still sharded alone.
    ("keep", [(13, "FSDP101")]),
    ("model.keep", [(13, "FSDP101")]),
    ("helpers.shard", [(13, "FSDP101")]),
])
def test_a_function_module_apply_calls_runs_on_each_of_its_modules(applied, expected):
    """laffytaffyz/dllm-distillation (VeOmni's `parallelize_model_fsdp2`): `model.apply(fn)` calls `fn`
    on every sub-module and the model itself, and `fn` shards the blocks it picks, before the root;
    FSDP101 said the root was sharded alone."""
    assert codes(f"""
    from torch.distributed.fsdp import fully_shard

    def parallelize(model, names):
        def shard_blocks(module):
            if module.__class__.__name__ in names:
                fully_shard(module)

        def keep(module):
            module.train()

        model.apply({applied})
        fully_shard(model)
        return model

    def main():
        parallelize(Net(), ["Block"])
    """, ["FSDP101"]) == expected


def test_blocks_sharded_in_the_other_branch_are_not_after_the_root():
    # OLMo-core's block: each branch of the `if` shards its blocks and then the root.
    source = """
    from torch.distributed.fsdp import fully_shard

    def shard(model, combined):
        if not combined:
            fully_shard(model.attention)
            fully_shard(model)
        else:
            fully_shard(model.feed_forward)
            fully_shard(model)
    """
    assert codes(source) == []
    assert codes(source.replace("            fully_shard(model.attention)\n            fully_shard(model)\n",
                                "            fully_shard(model)\n            fully_shard(model.attention)\n")) == [(7, "FSDP102")]


def test_a_list_of_modules_sharded_one_by_one_is_no_root_left_unsharded():
    # axolotl's fp32 norms: a list of (name, module) pairs built here is not a module whose blocks
    # were sharded; a model built here and never sharded itself is, named as its code names it.
    source = """
    from torch.distributed.fsdp import fully_shard

    def shard_norms(model):
        matches = [(name, module) for name, module in model.named_modules() if "norm" in name]
        for _name, module in matches:
            fully_shard(module)

    def build():
        net = Net()
        for block in net.layers:
            fully_shard(block)
        net(1)
        return 0

    def main(model):
        shard_norms(model)
        fully_shard(model)
        build()
    """
    found = [(d.line, d.message) for d in check_source(textwrap.dedent(source), select=["FSDP102"])]
    assert [line for line, _ in found] == [12]
    assert found[0][1].startswith("blocks of `net` are sharded but `net` itself never is")


def test_a_forward_followed_by_its_backward_leaves_the_root_resharded():
    # torchao's low-bit optimizer test builds a second optimizer after training steps: the backward
    # resharded the root (checked: DTensor parameters again on torch 2.13).
    source = """
    import torch
    from torch.distributed.fsdp import fully_shard

    model = Net()
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    loss = model(x).sum()
    loss.backward()
    optimizer = torch.optim.AdamW(model.parameters())
    """
    assert codes(source, ["FSDP108"]) == []
    assert codes(source.replace("loss.backward()", "print(loss)"), ["FSDP108"]) == [(11, "FSDP108")]
    # A backward called on an expression, or through torch.autograd (stable-pretraining's distributed
    # test harness: `out.mean().backward()`; checked on 2 CPU ranks: the root's parameters are DTensors again).
    assert codes(source.replace("loss.backward()", "loss.mean().backward()"), ["FSDP108"]) == []
    assert codes(source.replace("loss.backward()", "torch.autograd.backward(loss)"), ["FSDP108"]) == []
    assert codes(source.replace("loss.backward()", "loss.mean().detach()"), ["FSDP108"]) == [(11, "FSDP108")]


def test_modules_collected_from_a_model_into_a_list_are_its_units():
    # verl's apply_fsdp2: blocks picked by class name into a list, sharded, then the root.
    source = """
    from torch.distributed.fsdp import fully_shard

    model = Net()
    modules = []
    for name, module in model.named_modules():
        if module.__class__.__name__ in names:
            modules.append(module)
    for module in modules:
        fully_shard(module)
    fully_shard(model)
    """
    assert codes(source, ["FSDP101"]) == []
    assert codes(source.replace("modules.append(module)", "modules.append(Block())"), ["FSDP101"]) == [(11, "FSDP101")]


def test_modules_paired_in_tuples_from_a_list_taken_from_the_model_are_its_units():
    # modelscope/twinkle's NativeFSDPStrategy: the layers a helper finds in the model, paired with
    # their experts in tuples, each layer sharded, then the root. Near miss: pairs of new blocks.
    source = """
    from torch.distributed.fsdp import fully_shard

    def decoder_layers(model):
        return [m for m in model.modules() if m.__class__.__name__ in names]

    model = Net()
    pairs = []
    for layer in decoder_layers(model):
        pairs.append((layer, None))
    for layer, experts in pairs:
        fully_shard(layer)
    fully_shard(model)
    """
    assert codes(source, ["FSDP101"]) == []
    assert (13, "FSDP101") in codes(source.replace("pairs.append((layer, None))", "pairs.append((Block(), None))"), ["FSDP101"])


def test_a_rank_within_a_group_is_not_the_global_rank():
    source = """
    import torch
    import torch.distributed as dist

    rank = dist.get_rank(group)
    device = torch.device(f"cuda:{rank}")
    torch.cuda.set_device(dist.get_rank())
    """
    assert codes(source, ["FSDP302"]) == [(7, "FSDP302")]


def test_a_name_imported_from_another_package_is_not_the_runs_function_of_that_name(tmp_path: Path):
    """fms-fsdp's setup.py: `from setuptools import setup; setup(...)` was followed into the only
    `setup` of the run, fms_fsdp/utils/train_utils.py's, which starts an NCCL process group (FSDP301
    and FSDP304 reported there). A package that re-exports its own function still resolves."""
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("from mypkg.dist import setup\n")
    (package / "dist.py").write_text(textwrap.dedent("""
    import torch.distributed as dist

    def setup():
        dist.init_process_group("nccl")
    """))
    (tmp_path / "setup.py").write_text('from setuptools import setup\n\nsetup(name="mypkg")\n')
    assert [d.code for d in check_paths([tmp_path], select=["FSDP301", "FSDP304"])] == []
    (tmp_path / "train.py").write_text("import torch.distributed as dist\nfrom mypkg import setup\n\nsetup()\ndist.barrier()\n")
    assert sorted(d.code for d in check_paths([tmp_path], select=["FSDP301", "FSDP304"])) == ["FSDP301", "FSDP304"]


def test_a_package_import_is_the_package_not_a_script_module_of_the_same_last_name(tmp_path: Path):
    """physicsnemo: `from physicsnemo.utils import save_checkpoint` (the package gathers a full state
    dict) was resolved to an example script's `utils.py` that saves a sharded one (FSDP201 there).
    Near miss: a script beside that `utils.py` that imports it as `utils` still reaches it, though a
    top-level package `utils/` elsewhere defines the same name (multimodal's albef and mdetr)."""
    package = tmp_path / "physicsnemo" / "utils"
    package.mkdir(parents=True)
    (tmp_path / "physicsnemo" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from .checkpoint import save_checkpoint\n")
    (package / "checkpoint.py").write_text(textwrap.dedent("""
    import torch
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    def save_checkpoint(path, model):
        torch.save(get_model_state_dict(model, options=StateDictOptions(full_state_dict=True)), path)
    """))
    example = tmp_path / "examples" / "xa"
    example.mkdir(parents=True)
    (example / "utils.py").write_text(textwrap.dedent("""
    import torch

    def save_checkpoint(path, model):
        torch.save(model.state_dict(), path)
    """))
    train = textwrap.dedent("""
    from torch.distributed.fsdp import fully_shard
    from {module} import save_checkpoint

    def main(model):
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
        save_checkpoint("ckpt.pt", model)
    """)
    for folder in (tmp_path / "examples", example):  # the script's `utils.py` is then `examples.xa.utils`
        (folder / "__init__.py").write_text("")
    other = tmp_path / "tools" / "utils"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    (other / "dist.py").write_text((package / "checkpoint.py").read_text())
    (tmp_path / "test_ckpt.py").write_text(train.format(module="physicsnemo.utils"))
    assert [d.code for d in check_paths([tmp_path], select=["FSDP201"])] == []
    (example / "train.py").write_text(train.format(module="utils"))
    assert [(Path(d.path).name, d.code) for d in check_paths([tmp_path], select=["FSDP201"])] == [("utils.py", "FSDP201")]


# The shapes of issue 13's false positives and misses on real repositories, each through the rules.

def test_a_model_rebuilt_under_the_same_name_is_not_the_sharded_one():
    assert codes("""
    import copy
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    def main():
        model = Net()
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
        model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
        clone = copy.deepcopy(model)
        fully_shard(model[0])
        fully_shard(model)
    """) == []


def test_if_elif_arms_are_not_a_sequence():
    assert codes("""
    from torch.distributed.fsdp import fully_shard

    def prepare(model, mode):
        if mode == "root":
            fully_shard(model)
        elif mode == "blocks":
            for block in model.layers:
                fully_shard(block)
            fully_shard(model)
    """) == []


def test_the_root_sharded_last_by_a_chain_or_a_literal_tuple():
    assert codes("""
    import itertools
    from torch.distributed.fsdp import fully_shard

    def by_chain(model):
        for module in itertools.chain(model.layers, [model]):
            fully_shard(module)
        return model(1)

    def by_tuple(model):
        for module in (model.embed, model.head, model):
            fully_shard(module)
        return model(1)
    """) == []


def test_a_helper_after_sharding_builds_the_optimizer_and_runs_a_step():
    assert codes("""
    import torch
    from torch.distributed.fsdp import fully_shard

    def setup(model, batch):
        optimizer = torch.optim.AdamW(model.parameters())
        model(batch).sum().backward()
        optimizer.step()
        return optimizer

    def main(batch):
        model = Net()
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
        optimizer = setup(model, batch)
    """) == []


DECORATED = """
import functools
import os
import torch
import torch.distributed as dist

def cleanup(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            {finally_}

    return wrapper

@cleanup
def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")

if __name__ == "__main__":
    main()
"""


def test_a_decorator_that_destroys_the_group_in_finally():
    assert codes(DECORATED.format(finally_="dist.destroy_process_group()"), select=["FSDP304"]) == []
    assert codes(DECORATED.format(finally_="print('done')"), select=["FSDP304"]) == [(20, "FSDP304")]


def test_each_function_of_a_dispatch_table_is_a_path_of_its_own():
    source = """
    import os
    import torch
    import torch.distributed as dist

    def run_a():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl")
        dist.destroy_process_group()

    def run_b():
        {device}
        dist.init_process_group("nccl")
        dist.barrier()
        dist.destroy_process_group()

    MODES = {{"a": run_a, "b": run_b}}
    if __name__ == "__main__":
        MODES[os.environ["MODE"]]()
    """
    assert codes(source.format(device='torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))'), select=["FSDP301"]) == []
    assert codes(source.format(device="pass"), select=["FSDP301"]) == [(13, "FSDP301")]


def test_a_function_that_dispatches_through_the_modules_table():
    """AReaL's torchrun scripts: `main` starts NCCL, then calls `REGISTRY[args.test]()`, each function
    of which chooses its device (a false FSDP301 error before the table was read from the module)."""
    source = """
    import os
    import torch
    import torch.distributed as dist

    def run_a():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.barrier()

    def run_b():
        {device}
        dist.barrier()

    REGISTRY = {{"a": run_a, "b": run_b}}

    def main():
        dist.init_process_group(backend="nccl")
        try:
            REGISTRY[os.environ["TEST"]]()
        finally:
            dist.destroy_process_group()

    if __name__ == "__main__":
        main()
    """
    assert codes(source.format(device='torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))'), select=["FSDP301"]) == []
    # A table the module binds twice is not known: nothing is seen to choose the device, nor to use
    # the group, until `main`'s own barrier.
    unknown = source.format(device="pass").replace("\n    def main", "\n    REGISTRY = {}\n    def main")
    assert codes(unknown, select=["FSDP301"]) == []
    assert codes(unknown.replace('REGISTRY[os.environ["TEST"]]()', 'REGISTRY[os.environ["TEST"]]()\n            dist.barrier()'), select=["FSDP301"]) == [(18, "FSDP301")]


def test_a_rank_test_through_an_object_is_a_guard():
    assert codes("""
    import torch
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    def save(model):
        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if Cluster().get_rank() == 0:
            torch.save(state, "model.pt")
    """) == []


@pytest.mark.parametrize("initialize, expected", [
    ("for p in model.parameters():\n            nn.init.trunc_normal_(p, std=0.02)", []),
    # Duanyll/flow-control's loader: the model's half of `get_state_dict(model, [])`, filled in place by `dcp.load`.
    ("model_sd, _ = get_state_dict(model, [])\n        dcp.load(model_sd, checkpoint_id=path)", []),
    # Near miss: the optimizer's half, which holds none of the model's weights.
    ("_, model_sd = get_state_dict(model, [])\n        dcp.load(model_sd, checkpoint_id=path)", [(17, "FSDP106")]),
])
def test_initializing_or_loading_each_parameter_materializes_a_meta_model(initialize, expected):
    assert codes(f"""
    import torch
    import torch.nn as nn
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard

    def main(path):
        with torch.device("meta"):
            model = Transformer()
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
        model.to_empty(device="cuda")
        {initialize}
        return model(1)
    """) == expected


@pytest.mark.parametrize("test, expected", [
    # Cornstarch's run_vlm_fsdp.py: the blocks found by a type test; nothing initializes the weights.
    ("isinstance(module, nn.ModuleList)", [(16, "FSDP106")]),
    # Near miss: a function of unknown code given each module may initialize it.
    ("is_block_list(module)", []),
])
def test_a_builtin_that_only_reads_a_meta_module_does_not_initialize_it(test, expected):
    assert codes(f"""
    import torch
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard
    from blocks import is_block_list

    def main():
        with torch.device("meta"):
            model = Transformer()
        for module in model.modules():
            if {test}:
                for block in module:
                    fully_shard(block)
        fully_shard(model)
        model.to_empty(device="cuda")
        return model(1)
    """) == expected


def test_a_local_module_list_is_a_container_not_a_root():
    assert codes("""
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    def shard(model):
        blocks = nn.ModuleList([model.a, model.b])
        fully_shard(blocks)
        fully_shard(model)
    """) == [(7, "FSDP107")]


@pytest.mark.parametrize("kept, expected", [
    # OneScience's Megatron copy: the data-parallel wrapper keeps the module it is given in `self.module`;
    # DualPipeV, another class, keeps an `nn.ModuleList` there. The wrapper's module is no container.
    ("module", []),
    # Near miss: both classes keep a ModuleList there.
    ("nn.ModuleList([module])", [(16, "FSDP107")]),
])
def test_an_attribute_another_class_makes_a_module_list_is_not_one_by_its_name(kept, expected):
    assert codes(f"""
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    class DualPipeV(nn.Module):
        def __init__(self, modules):
            self.module = nn.ModuleList(modules)

    class BaseDataParallel(nn.Module):
        def __init__(self, module):
            self.module = {kept}

    class Wrapper(BaseDataParallel):
        def __init__(self, module):
            super().__init__(module=module)
            fully_shard(self.module)
    """, select=["FSDP107"]) == expected


def test_a_module_tensor_parallelized_in_place_is_still_the_leaf_it_was():
    assert codes("""
    from torch import nn
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    def shard(mesh, tp_mesh, tp):
        model = nn.Linear(128, 128)
        if tp > 1:
            model = parallelize_module(model, tp_mesh, ColwiseParallel())
        fully_shard(model, mesh=mesh)
    """) == []


def test_generate_is_reported_only_where_the_checked_code_calls_forward_itself():
    # NeMo's SALM: Hugging Face's generate calls self(...), which runs FSDP2's hooks.
    assert codes("""
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM

    def build(mesh, input_ids):
        llm = AutoModelForCausalLM.from_pretrained("gpt2")
        for block in llm.transformer.h:
            fully_shard(block, mesh=mesh)
        fully_shard(llm, mesh=mesh)
        return llm.generate(input_ids=input_ids)
    """) == []
    assert codes("""
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    class Net(nn.Module):
        def generate(self, x):
            return self.forward(x).argmax()

    def main(x):
        model = Net()
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
        return model.generate(x)
    """) == [(7, "FSDP103")]


def test_a_function_a_test_patches_with_a_mock_runs_no_code_of_the_run():
    # tnt's prepare_module tests: the helper that shards is replaced by @patch, so nothing is sharded.
    source = """
    from unittest.mock import patch
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    def shard(module):
        for block in module.layers:
            fully_shard(block)
        fully_shard(module)
        return module

    def prepare(module):
        return shard(module)

    {decorator}
    def test_dispatch(mock_shard):
        module = nn.Module()
        prepare(module)
        prepare(module)
    """
    assert codes(source.format(decorator='@patch(f"{__name__}.shard")')) == []
    assert codes(source.format(decorator='@patch("pkg.prepare_module.shard")')) == []
    assert codes(source.format(decorator="@patch.object(nn, 'Module')")) != []  # another name patched: still sharded twice


def test_a_torch_function_a_test_replaces_with_monkeypatch_is_no_sharding():
    """Automodel's unit tests: `monkeypatch.setattr(module, "fully_shard", fake)`, then the helper that
    shards blocks and not the root: nothing is sharded."""
    source = """
    import sys
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    def shard_block(module, mesh):
        for sub in module.children():
            fully_shard(sub, mesh=mesh)

    def test_shard_block_calls({params}):
        model = Model()
        block = model.layers[0]
        monkeypatch.setattr({target}, fake)
        shard_block(block, mesh=object())
        model(1)
    """
    assert codes(source.format(params="monkeypatch", target='sys.modules[__name__], "fully_shard"'), select=["FSDP102"]) == []
    assert codes(source.format(params="monkeypatch", target='"pkg.parallel.fully_shard"'), select=["FSDP102"]) == []
    # Near misses: another name replaced, and no pytest fixture of that name.
    assert codes(source.format(params="monkeypatch", target='sys.modules[__name__], "init_device_mesh"'), select=["FSDP102"]) == [(8, "FSDP102")]
    assert codes(source.format(params="patcher", target='sys.modules[__name__], "fully_shard"'), select=["FSDP102"]) == [(8, "FSDP102")]


def test_a_call_expected_to_raise_is_not_followed():
    # tnt's GPU tests: prepare_fsdp2 rejects its arguments under assertRaises before sharding anything.
    assert codes("""
    import pytest
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    def prepare(module, strategy):
        if strategy is None:
            raise ValueError("no strategy")
        for block in module.layers:
            fully_shard(block)
        fully_shard(module)

    def test_rejects():
        module = nn.Module()
        with pytest.raises(ValueError):
            prepare(module, None)
        with pytest.raises(ValueError):
            prepare(module, None)
    """) == []


def test_a_loop_over_named_modules_shards_the_root_too():
    # torchtune's test_embedding_utils: `named_modules()` starts with the model itself.
    source = """
import copy
from torch.distributed.fsdp import fully_shard

def build():
    model = Model()
    base_model = copy.deepcopy(model)
    for name, module in reversed(list(base_model.named_modules())):
        if isinstance(module, nn.ModuleList):
            continue
        fully_shard(module)
    base_model(1)
    return 1
"""
    assert codes(source) == []
    assert codes(source.replace("named_modules()", "named_children()")) == [(11, "FSDP102")]


@pytest.mark.parametrize("module_file", ["tp.py", "tp/__init__.py"])
def test_a_script_imports_the_module_beside_it_when_two_folders_hold_one_of_that_name(tmp_path: Path, module_file: str):
    # gpt-fast: tp.py and mixtral-moe/tp.py, each imported by the generate.py beside it; or a package
    # of that name beside it.
    parallel = """
        from torch.distributed.fsdp import fully_shard

        def parallelize(model):
            fully_shard(model.{block})
            fully_shard(model)
    """
    script = """
        import torch
        from tp import parallelize

        def main():
            model = Net()
            optimizer = torch.optim.AdamW(model.parameters())
            parallelize(model)
    """
    (tmp_path / "moe").mkdir()
    for folder, block in ((tmp_path, "layers[0]"), (tmp_path / "moe", "experts[0]")):
        (folder / module_file).parent.mkdir(exist_ok=True)
        (folder / module_file).write_text(textwrap.dedent(parallel.format(block=block)))
        (folder / "generate.py").write_text(textwrap.dedent(script))
    found = sorted((str(Path(d.path).resolve().relative_to(tmp_path.resolve())), d.line, d.code) for d in check_paths([tmp_path]))
    assert found == [("generate.py", 7, "FSDP104"), ("moe/generate.py", 7, "FSDP104")]


def test_a_module_taken_by_getattr_or_from_a_call_not_followed_is_part_of_its_model():
    """NeMo RL's `getattr(model, "backbone", model.model)`, prime-rl's `getattr(lm, "a", None) or
    getattr(lm, "b", None)` and a library's `get_language_model(model)`: sub-modules of a model sharded
    after them, not roots left unsharded (FSDP102 and FSDP101 fired on them)."""
    for taken in ['getattr(model, "backbone", model.model)', 'getattr(model, "backbone")', 'getattr(model, "backbone", None)',
                  "model.backbone or model.model", 'getattr(model, "a", None) or getattr(model, "b", None)', "get_language_model(model)"]:
        assert codes(f"""
        from torch.distributed.fsdp import fully_shard
        from mylib import get_language_model

        def shard(model):
            inner = {taken}
            for layer in inner.layers:
                fully_shard(layer)
            fully_shard(inner.embed)
            fully_shard(model)

        shard(Net())
        """, select=["FSDP1"]) == [], taken
    # Still a root of its own: a module built from nothing the run shards.
    assert codes("""
    from torch.distributed.fsdp import fully_shard
    from mylib import get_language_model

    def shard(config):
        inner = get_language_model(config)
        for layer in inner.layers:
            fully_shard(layer)
        optimizer = torch.optim.AdamW(inner.parameters())

    shard(cfg)
    """, select=["FSDP102"]) == [(8, "FSDP102")]


def test_a_shard_of_a_module_the_model_cannot_name_may_be_the_roots_block():
    """xtuner's `_fully_shard(module=None)`: `target = module or self` shards each layer, then the root.
    `layer or self` is one of two modules the model cannot tell apart, so the root may well have had
    its blocks sharded first: no FSDP101. With no such shard, the root alone is still reported."""
    source = """
    from torch import nn
    from torch.distributed.fsdp import fully_shard

    class Model(nn.Module):
        def _shard(self, module=None):
            target = module or self
            fully_shard(target)

        def shard(self):
            {blocks}
            self._shard()

    def main(x):
        model = Model()
        model.shard()
        model(x).sum().backward()
    """
    assert codes(source.format(blocks="for layer in self.layers.values():\n                self._shard(module=layer)"), select=["FSDP101"]) == []
    assert codes(source.format(blocks="pass"), select=["FSDP101"]) == [(8, "FSDP101")]


def test_a_test_that_the_module_is_a_wrapper_of_another_kind_says_what_it_is_there():
    # dion: DDP where there is no mesh, fully_shard where there is one; `no_sync` only under
    # `isinstance(model, DDP) and ...`, where the model is DDP's, not the module fully_shard was applied to.
    source = """
    import torch
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    def main(mesh, x, accumulate):
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
        if mesh is not None:
            fully_shard(model)
        else:
            model = DDP(model)
        if {test}:
            with model.no_sync():
                model(x).sum().backward()
    """
    assert codes(source.format(test="isinstance(model, DDP) and accumulate"), ["FSDP105"]) == []
    assert codes(source.format(test="not (not isinstance(model, torch.nn.parallel.DistributedDataParallel) or not accumulate)"), ["FSDP105"]) == []
    assert codes(source.format(test="isinstance(model, DDP) or accumulate"), ["FSDP105"]) == [(13, "FSDP105")]
    assert codes(source.format(test="isinstance(model, torch.nn.Module) and accumulate"), ["FSDP105"]) == [(13, "FSDP105")]


def test_blocks_found_through_chained_conditional_aliases_are_the_models():
    # bionemo-framework: `base = model.model if ... else model.esm`, then `base.encoder.layers if ... else
    # base.encoder.layer`: the layers sharded are the model's, sharded before it.
    assert codes("""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForMaskedLM

    def main():
        model = AutoModelForMaskedLM.from_pretrained("esm2")
        base = model.model if hasattr(model, "model") else model.esm
        stack = base.encoder.layers if hasattr(base.encoder, "layers") else base.encoder.layer
        for layer in stack:
            fully_shard(layer)
        fully_shard(model)
    """, ["FSDP101"]) == []


def test_fsdp201_a_file_per_rank_is_a_warning_a_file_shared_by_the_ranks_an_error():
    source = """
import os
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

def main(model, rank_dir):
    fully_shard(model)
    path = "shard_{}.pt".format(dist.get_rank())
    torch.save(model.state_dict(), path)
    torch.save(model.state_dict(), os.path.join(rank_dir, "model.pt"))
"""
    found = [(d.line, d.code, d.severity) for d in check_source(source, "train.py", select=["FSDP201"])]
    assert found == [(10, "FSDP201", "warning"), (11, "FSDP201", "error")], found


def test_fsdp201_bytes_saved_into_a_buffer_of_the_process_are_no_file():
    """pufanyi/vbvr-rl's round-trip check: the sharded optimizer state saved into an `io.BytesIO`
    (a name bound to one, or one written in the call) and read back in the same process. Near miss:
    the same state saved to a path."""
    source = """
import io
import torch
from torch.distributed.fsdp import fully_shard

def main(model):
    fully_shard(model)
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    torch.save(model.state_dict(), io.BytesIO())
    torch.save(model.state_dict(), "model.pt")
"""
    found = [(d.line, d.code) for d in check_source(source, "train.py", select=["FSDP201"])]
    assert found == [(11, "FSDP201")], found


def test_fsdp201_the_state_dict_helpers_without_full_state_dict_give_the_sharded_state():
    """ditty's `get_optimizer_state_dict(model, optimizer)` saved on rank 0: the helpers' default is
    the sharded state (DTensors, checked on 2 CPU ranks), as `model.state_dict()` is. Near misses:
    `full_state_dict=True` gathers it; options the model does not know (a parameter, `**`, a flag)
    are not judged."""
    source = """
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

def main(model, optimizer, given, flag, extra):
    fully_shard(model)
    state = get_optimizer_state_dict(model, optimizer{arguments})
    if dist.get_rank() == 0:
        torch.save(state, "optimizer.pt")
"""
    for arguments, reported in [("", True), (", options=StateDictOptions(cpu_offload=True)", True), (", options=None", True),
                                (", options=StateDictOptions(full_state_dict=True)", False), (", options=given", False),
                                (", options=StateDictOptions(full_state_dict=flag)", False), (", **extra", False)]:
        found = [d.code for d in check_source(source.format(arguments=arguments), "train.py", select=["FSDP201"])]
        assert found == (["FSDP201"] if reported else []), arguments
    found = [d.line for d in check_source(source.replace("get_optimizer_state_dict(model, optimizer{arguments})", "get_model_state_dict(model)"),
                                          "train.py", select=["FSDP201"])]
    assert found == [11]


def test_fsdp202_a_file_per_rank_holds_that_ranks_shards_not_a_full_state_dict():
    """ChatLearn's resume: `torch.load(f"model_world_size_{w}_rank_{r}.pt")` reads back the sharded
    state dict the same rank saved, and loading it into the sharded model works (2 CPU ranks)."""
    source = """
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

def main(model, root):
    fully_shard(model)
    path = f"{root}/model_rank_{dist.get_rank()}.pt"
    model.load_state_dict(torch.load(path))
    model.load_state_dict(torch.load(f"{root}/model.pt"))
"""
    assert [d.line for d in check_source(source, "train.py", select=["FSDP202"])] == [10]


def test_fsdp201_a_helper_whose_other_path_returns_another_object_is_not_known_to_return_the_state():
    """WeatherGenerator's `_get_full_model_state_dict`: `if fsdp: return gathered` (full tensors) `else:
    return sd`, the sharded state only where the model was not sharded (the same test). What a function
    returns is what holds on both paths; a `None` the other path returns weighs nothing."""
    source = """
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

def full_state(cfg, model):
    sd = model.state_dict()
    if cfg.fsdp:
        {first}
    return sd

def main(cfg, model):
    if cfg.fsdp:
        fully_shard(model)
    state = full_state(cfg, model)
    if dist.get_rank() == 0:
        torch.save(state, "model.pt")
"""
    gathered = "out = {}\n        for k, v in sd.items():\n            out[k] = v.full_tensor()\n        return out"
    for first, reported in [(gathered, False), ("return None", True), ("pass", True)]:
        found = [d.code for d in check_source(source.format(first=first), "train.py", select=["FSDP201"])]
        assert found == (["FSDP201"] if reported else []), first


def test_keywords_a_dict_written_out_passes_reach_the_call():
    # tiny-grpo: `fully_shard(module, **fsdp_kwargs)` with `fsdp_kwargs = {"mesh": mesh, ...}`: the call is
    # given `mesh`, written in the dict (FSDP112 once asked the call's syntax for the `mesh=` node and
    # failed). A 3-D mesh is refused at each call; a 1-D one is fine.
    source = """
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

def main(model):
    mesh = init_device_mesh("cuda", {shape})
    fsdp_kwargs = {{"mesh": mesh, "reshard_after_forward": True}}
    for layer in model.layers:
        fully_shard(layer, **fsdp_kwargs)
    fully_shard(model, **fsdp_kwargs)
"""
    found = check_source(source.format(shape="(2, 2, 2)"), "train.py")
    assert [(d.code, d.line) for d in found] == [("FSDP112", 10), ("FSDP112", 11)]
    assert all("`mesh` is built at train.py:7" in d.message for d in found)
    assert check_source(source.format(shape="(8,)"), "train.py") == []


def test_layers_taken_from_the_model_on_either_path_are_its_sub_modules():
    # bionemo's esm2 test (FSDP101 false warning): its blocks are the TE model's layers or the HF
    # model's, taken on exclusive paths and sharded one by one before the model. A model built by a
    # call with no sub-module sharded still reports.
    source = """
import sys
from torch.distributed.fsdp import fully_shard

def train(build, kind):
    net = build()
    if kind == "te":
        blocks = net.model.encoder.layers
    elif kind == "hf":
        blocks = net.esm.encoder.layer
    else:
        blocks = net.layers
    for block in blocks:
        fully_shard(block)
    fully_shard(net)
    whole = build()
    fully_shard(whole)

train(make, sys.argv[1])
"""
    assert [(d.code, d.line) for d in check_source(source, "train.py") if d.code == "FSDP101"] == [("FSDP101", 17)]


def test_a_copy_copies_an_fsdp_module_only_where_it_is_or_holds_a_unit():
    """NVlabs/FastGen deep-copies `self.transformer.condition_embedder`, a part of the sharded transformer
    that no `fully_shard` was given: it copies (its parameters as DTensors). A module holding a unit
    copies that unit, which refuses."""
    source = """
    import copy
    from torch.distributed.fsdp import fully_shard

    def main(model):
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model.encoder)
        ema = copy.deepcopy({copied})
    """
    assert codes(source.format(copied="model.encoder.embedding"), ["FSDP109"]) == []
    assert codes(source.format(copied="model.blocks[0].norm"), ["FSDP109"]) == []
    assert codes(source.format(copied="model.encoder"), ["FSDP109"]) == [(9, "FSDP109")]
    assert codes(source.format(copied="model"), ["FSDP109"]) == [(9, "FSDP109")]  # holds the blocks
    assert codes(source.format(copied="model.blocks[1]"), ["FSDP109"]) == [(9, "FSDP109")]


def test_a_method_only_the_constructor_calls_runs_before_the_methods_that_shard():
    """FastGen's `init_embedder()`, called by `__init__` only, copies a module the class's
    `fully_shard()` method shards later: at construction nothing is sharded yet. A method called from
    outside the class may run after, and is judged by what the class shards."""
    source = """
    import copy
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.Linear(4, 4)
            self.copied = self.prepare()

        def shard(self):
            fully_shard(self.transformer)

        def prepare(self):
            return self.copy_transformer()

        def copy_transformer(self):
            return copy.deepcopy(self.transformer)
    {outside}
    """
    assert codes(source.format(outside=""), ["FSDP109"]) == []
    assert codes(source.format(outside="""
    net = Net()
    net.shard()
    net.copy_transformer()
    """), ["FSDP109"]) == [(19, "FSDP109")]


def test_forward_bypasses_the_hooks_of_a_unit_only():
    """mamba-vla calls `self.action_expert.forward(...)` in a registered forward method: `action_expert`
    is a part of the sharded root that no `fully_shard` was given, with no hooks of its own to skip
    (its parameters are gathered by the root's). A block given to `fully_shard` has hooks."""
    source = """
    from torch.distributed.fsdp import fully_shard

    def main(model, x):
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        return {called}.forward(x)
    """
    assert codes(source.format(called="model.head"), ["FSDP103"]) == []
    assert codes(source.format(called="model.blocks[0]"), ["FSDP103"]) == [(8, "FSDP103")]
    assert codes(source.format(called="model"), ["FSDP103"]) == [(8, "FSDP103")]


def test_an_elif_knows_the_tests_before_it_failed():
    """apple/ml-starflow: `if hasattr(model, "set_requires_gradient_sync"): ... elif hasattr(model,
    "no_sync"): model.no_sync()`: every FSDP2 module takes the first arm."""
    source = """
    import contextlib
    from torch.distributed.fsdp import fully_shard

    def sync_context(model, sync):
        if {test}:
            model.set_requires_gradient_sync(sync)
            return contextlib.nullcontext()
        elif not sync:
            return model.no_sync()
        return contextlib.nullcontext()

    def main(model):
        fully_shard(model)
        with sync_context(model, False):
            pass
    """
    assert codes(source.format(test='hasattr(model, "set_requires_gradient_sync")'), ["FSDP105"]) == []
    assert codes(source.format(test='hasattr(model, "unshard_params")'), ["FSDP105"]) == [(10, "FSDP105")]


def test_a_method_called_where_the_object_is_known_to_have_it_is_not_fsdp2s():
    """baidu-baige/LoongForge: `elif hasattr(self.model, "no_sync"): with self.model.no_sync():` (DDP),
    `else: set_requires_gradient_sync(...)` (FSDP2): no FSDP2 module has `no_sync` (checked on torch
    2.13), so no FSDP2 module gets there. Near miss: a test of another attribute."""
    source = """
    import contextlib
    from torch.distributed.fsdp import fully_shard

    @contextlib.contextmanager
    def sync_context(model, sync):
        if sync:
            yield
        elif {test}:
            with model.no_sync():
                yield
        else:
            model.set_requires_gradient_sync(False)
            yield

    def main(model):
        fully_shard(model)
        with sync_context(model, False):
            pass
    """
    assert codes(source.format(test='hasattr(model, "no_sync")'), ["FSDP105"]) == []
    assert codes(source.format(test='hasattr(model, "module")'), ["FSDP105"]) == [(10, "FSDP105")]


def test_a_flag_that_returns_before_sharding_excludes_a_save_under_its_negation():
    """apple/ml-starflow: `parallelize_model` returns before any `fully_shard` unless `args.fsdp`, and
    `save_model` saves with `torch.save` only `if not args.fsdp` (else `dcp.save`)."""
    source = """
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.fsdp import fully_shard

    def parallelize(args, model):
        if not args.fsdp:
            return model
        fully_shard(model)
        return model

    def save(args, model, path):
        states = model.state_dict()
        if {saved}:
            torch.save(states, path)
        else:
            dcp.save(states, checkpoint_id=path)

    def main(args, model):
        model = parallelize(args, model)
        save(args, model, "ckpt")
    """
    assert codes(source.format(saved="not args.fsdp"), ["FSDP201"]) == []
    assert codes(source.format(saved="args.fsdp"), ["FSDP201"]) == [(15, "FSDP201")]


def test_blocks_sharded_from_an_iterable_built_from_the_model_are_its_sub_modules():
    """rosinality/halite's `apply_fsdp`: `for i, block, _ in block_iterator: fully_shard(block)`, where
    `block_iterator` is a comprehension over `model.blocks.items()` or a caller's function of `model`,
    then `fully_shard(model)`: neither is a root sharded alone. Near miss: a model sharded with no loop."""
    source = """
    import torch
    from torch.distributed.fsdp import fully_shard

    def apply_fsdp(model, block_iterator=None):
        if block_iterator is None:
            block_iterator = [(i, block, None) for i, block in model.blocks.items()]
        else:
            block_iterator = block_iterator(model)
        {loop}
        fully_shard(model)

    def main():
        apply_fsdp(torch.nn.Transformer())
    """
    loop = "for i, block, _ in block_iterator:\n            fully_shard(block)"
    assert codes(source.format(loop=loop), ["FSDP101"]) == []
    assert codes(source.format(loop="pass"), ["FSDP101"]) == [(11, "FSDP101")]


@pytest.mark.parametrize("gathered_where, reported", [
    # deepmd-kit's trainer: the full state dict gathered where the parameters are sharded, the
    # module's own `state_dict()` elsewhere, where it is not: the saved dict holds no shard.
    ("self.shards", []),
    # Near miss: the module's own state taken where it is sharded.
    ("not self.shards", [(22, "FSDP201")]),
])
def test_fsdp201_reads_where_the_state_was_taken(gathered_where, reported):
    source = f"""
import lib
import torch
from torch.distributed.fsdp import fully_shard


class Trainer:
    def __init__(self, shards):
        self.shards = shards
        self.model = lib.Net()
        if self.shards:
            fully_shard(self.model)

    def collect(self):
        if {gathered_where}:
            state = lib.gather(self.model)
        else:
            state = self.model.state_dict()
        return state

    def save(self):
        torch.save({{"model": self.collect()}}, "m.pt")


Trainer(lib.flag()).save()
"""
    assert codes(source, ["FSDP201"]) == reported


@pytest.mark.parametrize("order, reported", [
    # hongyihuang/llama2.c: the optimizer of `model.configure_optimizers(...)`, the model moved to the
    # GPU as it was built, before the FSDP1 wrap.
    ("optimizer = model.configure_optimizers(1e-3)\nmodel = FSDP(model, auto_wrap_policy=policy)", [(14, "FSDP104")]),
    # Near miss: the optimizer built after the wrap.
    ("model = FSDP(model, auto_wrap_policy=policy)\noptimizer = model.configure_optimizers(1e-3)", []),
])
def test_fsdp104_an_optimizer_a_method_of_the_moved_model_builds(order, reported):
    source = f"""
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


class Transformer(torch.nn.Module):
    def configure_optimizers(self, lr):
        params = [p for p in self.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=lr)


policy = lib.policy()
model = Transformer().cuda()
{order}
"""
    assert codes(source, ["FSDP104"]) == reported


@pytest.mark.parametrize("saved, reported", [
    # The tensors of a state dict moved to the CPU are still DTensors, each this rank's shard.
    ("{k: v.cpu() for k, v in model.state_dict().items()}", [(10, "FSDP201")]),
    ("dict(model.state_dict().items())", [(10, "FSDP201")]),
    # Near miss: each gathered first.
    ("{k: v.full_tensor().cpu() for k, v in model.state_dict().items()}", []),
])
def test_fsdp201_the_entries_of_a_sharded_state_dict(saved, reported):
    source = f"""
import torch
from torch.distributed.fsdp import fully_shard


def main(model):
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    torch.save({saved}, "m.pt")
"""
    assert codes(source, ["FSDP201"]) == reported


@pytest.mark.parametrize("after, reported", [
    # sanketpurandare/playground's shape: sharded through `functools.partial(fully_shard, ...)`, given
    # memory with `to_empty` and never initialized, then run.
    ("pass", [(17, "FSDP106")]),
    # Near miss: initialized after `to_empty`.
    ("model.reset_parameters()", []),
])
def test_fsdp106_a_model_sharded_through_a_partial(after, reported):
    source = f"""
import functools
import torch
from torch.distributed.fsdp import fully_shard


def main(mesh, x):
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    shard = functools.partial(fully_shard, mesh=mesh)
    for layer in model:
        shard(layer)
    shard(model)
    model.to_empty(device="cuda")
    {after}
    optimizer = torch.optim.Adam(model.parameters())
    model(x).sum().backward()
"""
    assert codes(source, ["FSDP106"]) == reported


@pytest.mark.parametrize("plan, expected", [
    # LightX2V's shard plan: the blocks, then the root, each an element of a plan the model does not
    # know, sharded by one helper in a loop: which module each pass shards is not known.
    ("shard_plan(model)", []),
    # Near miss: a plan written out, the root alone in it.
    ("((model, False),)", [(5, "FSDP101")]),
])
def test_a_module_taken_from_a_plan_not_known_is_not_the_root_alone(plan, expected):
    assert codes(f"""
    from torch.distributed.fsdp import fully_shard

    def shard_one(module, reshard):
        fully_shard(module, reshard_after_forward=reshard)

    def main():
        model = Transformer()
        for module, reshard in {plan}:
            shard_one(module, reshard)
        model(x).sum().backward()
    """, select=["FSDP101"]) == expected


@pytest.mark.parametrize("shards, expected", [
    # garrett361/mamba's test: each side of the tie sharded alone: one split, one finding, at the first.
    ("fully_shard(model.output)\nfully_shard(model.embed)\nfully_shard(model)", [(13, "FSDP111")]),
    # One side sharded alone, the other left to the root: the same one finding.
    ("fully_shard(model.output)\nfully_shard(model)", [(13, "FSDP111")]),
])
def test_a_tied_pair_split_across_units_is_one_finding(shards, expected):
    source = textwrap.dedent("""
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(8, 4)
            self.output = nn.Linear(4, 8, bias=False)
            self.output.weight = self.embed.weight

    model = LM()
    """) + shards + "\n"
    assert [(d.line, d.code) for d in check_source(source, select=["FSDP111"])] == expected
