"""The semantic model's own facts, asked of the model directly (tests/test_model.py asks them through
the rules): which events a flow holds, which exclude each other, what a name is bound to."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst

from fsdplint import model
from fsdplint.plan import make_plan
from fsdplint.source import SourceFile


def program_of(source: str, name: str = "train.py") -> model.Program:
    text = textwrap.dedent(source)
    file = model.build_file_model(SourceFile(Path(name), name, text, "utf-8", False), cst.parse_module(text))
    return model.Program([file])


def flow_of(program: model.Program, function: str | None) -> model.Flow:
    return next(flow for flow in program.flows if (flow.function.qualname if flow.function else None) == function)


def test_a_flow_past_its_budget_is_unknown_not_partial():
    calls = "\n".join(f"    part{i} = middle(model)" for i in range(model.FLOW_BUDGET // 100))
    program = program_of(f"""
from torch.distributed.fsdp import fully_shard

def middle(model):
{chr(10).join(f"    x{i} = model.layer{i}" for i in range(60))}

def main(model):
{calls}
    fully_shard(model)
""")
    main = flow_of(program, "main")
    assert main.exhausted and main.events == []
    assert program.exhausted_flows == [main]
    assert not flow_of(program, "middle").exhausted


def test_analysis_starts_only_from_files_that_use_torch_distributed():
    texts = {
        # sympy's shape: a function named like a rank getter, in a package with no distributed code
        "combinatorics/perm.py": "def get_rank(self):\n    return self._rank\n",
        "combinatorics/use.py": "from combinatorics.perm import get_rank\nr = get_rank(p)\n",
        "train.py": "import torch.distributed as dist\nrank = dist.get_rank()\n",
    }
    plan = make_plan(sorted(texts), texts.__getitem__, ("get_rank",), set(), lambda path: path[:-3].replace("/", "."))
    assert plan.parsed == ["train.py"]
