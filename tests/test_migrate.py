"""FSDP501 on the shapes the fixtures do not cover: exact migrations, and what is left for a person."""

from __future__ import annotations

import ast
import textwrap

from fsdplint.api import check_source, fix_source

HEADER = "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"


def migrate(body: str) -> str:
    fixed = fix_source(HEADER + textwrap.dedent(body), "train.py", select=["FSDP501"], unsafe_fixes=True)
    ast.parse(fixed)
    return fixed


def messages(body: str) -> list[str]:
    return [d.message for d in check_source(HEADER + textwrap.dedent(body), "train.py", select=["FSDP501"])]


def test_a_config_variable_used_elsewhere_is_inlined_and_kept():
    fixed = migrate("""\
        from torch.distributed.fsdp import CPUOffload, MixedPrecision
        bf16 = MixedPrecision(param_dtype=torch.bfloat16)
        offload = CPUOffload(offload_params=True)
        model = FSDP(torch.nn.Linear(2, 2), mixed_precision=bf16, cpu_offload=offload)
        plugin = {"mixed_precision_policy": bf16}
    """)
    assert "bf16 = MixedPrecision(param_dtype=torch.bfloat16)\n" in fixed  # still FSDP1's, for its other use
    assert "offload = " not in fixed  # used only by the wrap
    assert "model = fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16), offload_policy=CPUOffloadPolicy())\n" in fixed


def test_isinstance_checks_become_fsdp_module():
    fixed = migrate("""\
        model = FSDP(torch.nn.Linear(2, 2))
        if isinstance(model, FSDP):
            model.clip_grad_norm_(1.0)
    """)
    assert "if isinstance(model, FSDPModule):\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n" in fixed
    assert "FullyShardedDataParallel" not in fixed


def test_the_wrapper_attribute_is_left_for_a_person():
    body = """\
        model = FSDP(torch.nn.Linear(2, 2))
        model.module.reset_parameters()
    """
    assert migrate(body) == HEADER + textwrap.dedent(body)
    assert messages(body) == ["`FSDP(...)` is FSDP1; migrate it by hand: `model.module`: FSDP2 has no wrapper module; use the model itself"]


def test_a_model_that_leaves_the_checked_code_is_migrated_with_a_note():
    (message,) = messages("""\
        def build():
            model = FSDP(torch.nn.Linear(2, 2))
            return model
    """)
    assert message.startswith("`FSDP(...)` is FSDP1: migrate to FSDP2 `fully_shard`; it is returned by `build`, whose callers are not checked")


def test_a_wrap_is_migrated_only_if_every_caller_can_be():
    body = """\
        def build(module):
            return FSDP(module)

        def train():
            model = build(torch.nn.Linear(2, 2))
            model(torch.ones(2))

        def evaluate():
            model = build(torch.nn.Linear(2, 2))
            with model.no_sync():
                model(torch.ones(2))
            FSDP.summon_full_params(model)
    """
    assert migrate(body) == HEADER + textwrap.dedent(body)
    (message,) = messages(body)
    assert "`FSDP.summon_full_params(...)` is FSDP1 API with no mapping here" in message


def test_sharding_strategies():
    fixed = migrate("""\
        from torch.distributed.fsdp import ShardingStrategy
        model = FSDP(torch.nn.Linear(2, 2), sharding_strategy=ShardingStrategy.SHARD_GRAD_OP)
    """)
    assert "model = fully_shard(model, reshard_after_forward=False)\n" in fixed
    (message,) = messages("""\
        from torch.distributed.fsdp import ShardingStrategy
        model = FSDP(torch.nn.Linear(2, 2), sharding_strategy=ShardingStrategy.NO_SHARD)
    """)
    assert "`sharding_strategy=ShardingStrategy.NO_SHARD` has no FSDP2 mapping here" in message
