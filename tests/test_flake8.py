"""The flake8 plugin, through the real flake8: findings as flake8 errors, under flake8's own selection and noqa."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
BAD = (FIXTURES / "FSDP103" / "bad.py").read_text()
FINDING_LINE = next(number for number, line in enumerate(BAD.splitlines(), 1) if "# expect: FSDP103" in line)


def flake8(path: Path, *options: str) -> tuple[int, list[tuple[int, int, str]]]:
    """flake8's exit code and its findings as (line, column, code), with no user or project config."""
    result = subprocess.run([sys.executable, "-m", "flake8", "--isolated", *options, str(path)],
                            capture_output=True, text=True, timeout=60)
    assert not result.stderr, result.stderr
    found = [(int(line), int(column), code) for line, column, code in re.findall(r"^.*?:(\d+):(\d+): (\w+) ", result.stdout, re.M)]
    return result.returncode, found


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(BAD)
    return path


def test_flake8_reports_fsdp_findings_by_default(script: Path):
    code, found = flake8(script)
    column = BAD.splitlines()[FINDING_LINE - 1].index("model.forward") + 1
    assert code == 1
    assert [f for f in found if f[2].startswith("FSDP")] == [(FINDING_LINE, column, "FSDP103")]


def test_flake8_selection_applies(script: Path):
    assert flake8(script, "--select", "FSD")[1] == [(FINDING_LINE, BAD.splitlines()[FINDING_LINE - 1].index("model.forward") + 1, "FSDP103")]
    assert flake8(script, "--select", "FSD", "--extend-ignore", "FSDP103") == (0, [])


def test_flake8_noqa_is_flake8s(script: Path):
    lines = BAD.splitlines(keepends=True)
    # flake8 matches noqa codes by prefix; fsdplint itself would call FSDP1 an unknown code.
    lines[FINDING_LINE - 1] = lines[FINDING_LINE - 1].rstrip("\n") + "  # noqa: FSDP1\n"
    script.write_text("".join(lines))
    assert flake8(script, "--select", "FSD") == (0, [])
    assert [f[2] for f in flake8(script, "--select", "FSD", "--disable-noqa")[1]] == ["FSDP103"]
