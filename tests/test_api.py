"""The public Python API: diagnostics with ranges and fix edits, applying edits, configuration."""

from __future__ import annotations

import ast
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from fsdplint.api import Position, Range, TextEdit, apply_edits, check_source, find_config, fix_source, text_edits

FIXTURES = Path(__file__).parent / "fixtures"

SCRIPT = textwrap.dedent("""\
    from torch.distributed.fsdp import fully_shard


    def step(model, x):
        fully_shard(model)
        label = "héllo 🙂"; out = model.forward(x)
        return out
""")


def test_diagnostic_carries_code_range_severity_and_fix_edits():
    [diagnostic] = check_source(SCRIPT, "train.py")
    assert (diagnostic.path, diagnostic.code, diagnostic.name, diagnostic.severity) == ("train.py", "FSDP103", "forward-bypasses-hooks", "error")
    line = SCRIPT.splitlines()[5]
    # Columns count code points: the emoji before the call is one column, not two or four.
    start = line.index("model.forward")
    assert diagnostic.range == Range(Position(6, start + 1), Position(6, start + len("model.forward(x)") + 1))
    assert (diagnostic.line, diagnostic.column) == (6, start + 1)
    assert diagnostic.fix.applicability == "safe"
    assert diagnostic.fix.edits == (TextEdit(Range(Position(6, start + 6), Position(6, start + 14)), ""),)
    assert apply_edits(SCRIPT, diagnostic.fix.edits) == SCRIPT.replace("model.forward(x)", "model(x)") == fix_source(SCRIPT, "train.py")


@pytest.mark.parametrize("folder", sorted(p for p in FIXTURES.iterdir() if (p / "fixed.py").exists()), ids=lambda p: p.name)
def test_each_fixture_fix_as_edits_removes_its_finding(folder: Path):
    bad = (folder / "bad.py").read_text()
    diagnostics = check_source(bad, "bad.py")
    fixable = [d for d in diagnostics if d.fix]
    assert fixable
    before = Counter(d.code for d in diagnostics)
    for diagnostic in fixable:
        fixed = apply_edits(bad, diagnostic.fix.edits)
        ast.parse(fixed)
        after = Counter(d.code for d in check_source(fixed, "bad.py"))
        assert after[diagnostic.code] < before[diagnostic.code], diagnostic


@pytest.mark.parametrize(("before", "after"), [
    ("a\nb\nc\n", "a\nB\nc\n"),
    ("a\r\nb\r\n", "x\r\na\r\nb\r\ny"),
    ("é🙂 = f(x)\n", "é🙂 = g(x)\n"),
    ("one\ntwo\nthree", "one\nthree"),
    ("x = 1\f\ny = 2\n", "x = 1\f\ny = 3\n"),  # a form feed is not a line break
    ("", "import os\n"),
])
def test_text_edits_reproduce_the_new_text(before: str, after: str):
    edits = text_edits(before, after)
    assert apply_edits(before, edits) == after
    assert sum(len(edit.new_text) for edit in edits) <= len(after)


def test_apply_edits_rejects_overlaps_and_positions_outside_the_text():
    overlapping = [TextEdit(Range(Position(1, 1), Position(1, 3)), "x"), TextEdit(Range(Position(1, 2), Position(1, 4)), "y")]
    with pytest.raises(ValueError, match="overlapping"):
        apply_edits("abcd", overlapping)
    with pytest.raises(ValueError, match="outside"):
        apply_edits("ab\n", [TextEdit(Range(Position(1, 9), Position(1, 9)), "x")])


def test_noqa_false_leaves_line_suppressions_to_the_host_tool():
    suppressed = SCRIPT.replace("model.forward(x)\n", "model.forward(x)  # noqa: FSDP103\n")
    assert check_source(suppressed) == []
    assert [d.code for d in check_source(suppressed, noqa=False)] == ["FSDP103"]
    stale = SCRIPT.replace("return out", "return out  # noqa: FSDP101")
    assert "FSDP003" in {d.code for d in check_source(stale)}
    assert "FSDP003" not in {d.code for d in check_source(stale, noqa=False)}


def test_select_ignore_and_config(tmp_path: Path):
    assert check_source(SCRIPT, ignore=["FSDP1"]) == []
    with pytest.raises(ValueError, match="unknown rule selector `FSDP999`"):
        check_source(SCRIPT, select=["FSDP999"])
    (tmp_path / "pyproject.toml").write_text('[tool.fsdplint]\nper-file-ignores = { "scripts/*" = ["FSDP103"] }\n')
    (tmp_path / "scripts").mkdir()
    config = find_config(tmp_path / "scripts" / "train.py")
    assert config == tmp_path / "pyproject.toml"
    assert check_source(SCRIPT, "scripts/train.py", config=config) == []
    assert [d.code for d in check_source(SCRIPT, "train.py", config=config)] == ["FSDP103"]
    (tmp_path / "pyproject.toml").write_text("[tool.fsdplint]\nselect = 3\n")
    with pytest.raises(ValueError, match="must be a list of strings"):
        check_source(SCRIPT, config=config)
