"""An internal error on one file is an FSDP009 naming the rule (or stage) and the file, the run exits 2,
and every other file and rule is still checked and fixed."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import fsdplint.model
from fsdplint.cli import main
from fsdplint.registry import all_rules

FORWARD = """\
import torch
from torch.distributed.fsdp import fully_shard

model = torch.nn.Sequential(torch.nn.Linear(2, 2))
fully_shard(model)
out = model.forward(torch.ones(2))
"""
# Both FSDP103 (line 6) and FSDP105 (line 7) on one file.
FORWARD_AND_NO_SYNC = FORWARD + "with model.no_sync():\n    model(torch.ones(2))\n"


@pytest.fixture
def tree(tmp_path, monkeypatch):
    (tmp_path / "good_file.py").write_text(FORWARD)
    (tmp_path / "broken_file.py").write_text(FORWARD_AND_NO_SYNC)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(*args: str):
    result = CliRunner().invoke(main, ["check", "--output-format", "concise", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output.splitlines()


def fail_on(file_name: str, original):
    def check(self, program):
        if any(file.display == file_name for file in program.files):
            raise ZeroDivisionError("boom")
        yield from original(self, program)

    return check


def test_rule_failing_on_one_file(tree, monkeypatch):
    rule = all_rules().by_code["FSDP103"]
    monkeypatch.setattr(rule, "check", fail_on("broken_file.py", rule.check))
    code, lines = run(".")
    assert code == 2
    internal = [line for line in lines if "FSDP009" in line]
    assert len(internal) == 1
    assert internal[0].startswith("broken_file.py:1:1: FSDP009") and "FSDP103 failed on this file: ZeroDivisionError: boom" in internal[0]
    assert any(line.startswith("good_file.py:6:7: FSDP103") for line in lines), lines  # the rule still ran on the other file
    assert any(line.startswith("broken_file.py:7:6: FSDP105") for line in lines), lines  # the other rules still ran on this one


def test_model_failing_on_one_file(tree, monkeypatch):
    build = fsdplint.model.build_file_model

    def failing(source, module):
        if source.display == "broken_file.py":
            raise KeyError("no such node")
        return build(source, module)

    monkeypatch.setattr(fsdplint.model, "build_file_model", failing)
    code, lines = run(".")
    assert code == 2
    assert any(line.startswith("broken_file.py:1:1: FSDP009") and "the semantic model failed on this file: KeyError" in line for line in lines), lines
    assert any(line.startswith("good_file.py:6:7: FSDP103") for line in lines), lines


def test_flows_failing_on_one_file(tree, monkeypatch):
    """The model's flow building fails on one file: each file is modelled alone, the other still checked."""
    build_flow = fsdplint.model.Program._build_flow

    def failing(self, file, function):
        if file.display == "broken_file.py":
            raise IndexError("tuple index out of range")
        return build_flow(self, file, function)

    monkeypatch.setattr(fsdplint.model.Program, "_build_flow", failing)
    code, lines = run(".")
    assert code == 2
    assert any(line.startswith("broken_file.py:1:1: FSDP009") and "IndexError" in line for line in lines), lines
    assert any(line.startswith("good_file.py:6:7: FSDP103") for line in lines), lines


def test_fix_failing_on_one_file(tree, monkeypatch):
    """A fix that raises is dropped and reported; the other fixes, in this file and others, are written."""
    import fsdplint.fixes

    apply = fsdplint.fixes.apply_fixes

    def failing(file, fixes):
        if file.display == "broken_file.py" and any("no_sync" in fix.message for fix in fixes):
            raise AttributeError("'With' object has no attribute 'items'")
        return apply(file, fixes)

    monkeypatch.setattr(fsdplint.fixes, "apply_fixes", failing)
    code, lines = run("--fix", ".")
    assert code == 2
    assert any(line.startswith("broken_file.py:1:1: FSDP009") and "the fix of FSDP105 failed on this file: AttributeError" in line for line in lines), lines
    assert (tree / "good_file.py").read_text() == FORWARD.replace("model.forward(", "model(")
    fixed = (tree / "broken_file.py").read_text()
    assert fixed == FORWARD_AND_NO_SYNC.replace("model.forward(", "model(")  # FSDP103 fixed, FSDP105 left as it was
