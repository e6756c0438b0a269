"""Every rule against its fixtures: exact findings on bad.py, silence on good.py, fixes that round-trip."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fsdplint.api import check_source, fix_source
from fsdplint.registry import all_rules
from fsdplint.rule import FixAvailability

FIXTURES = Path(__file__).parent / "fixtures"
EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>FSDP\d+(?:\s*,\s*FSDP\d+)*)")
RULE_DIRS = sorted(path for path in FIXTURES.iterdir() if path.is_dir() and re.fullmatch(r"FSDP\d+", path.name))


def expected_findings(text: str) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        match = EXPECT.search(line)
        if match:
            found += [(number, code.strip()) for code in match.group("codes").split(",")]
    return sorted(found)


def findings(text: str, path: Path) -> list[tuple[int, str]]:
    return sorted((d.line, d.code) for d in check_source(text, str(path)))


def test_every_check_rule_has_fixtures():
    codes = {rule.code for rule in all_rules().rules if not rule.engine_only}
    assert codes <= {path.name for path in RULE_DIRS}


@pytest.mark.parametrize("folder", RULE_DIRS, ids=lambda p: p.name)
def test_bad_reports_exactly_the_marked_lines(folder: Path):
    text = (folder / "bad.py").read_text()
    expected = expected_findings(text)
    assert expected, "bad.py marks no finding"
    assert all(code == folder.name for _, code in expected)
    assert findings(text, folder / "bad.py") == expected


@pytest.mark.parametrize("folder", RULE_DIRS, ids=lambda p: p.name)
def test_good_is_silent(folder: Path):
    assert findings((folder / "good.py").read_text(), folder / "good.py") == []


@pytest.mark.parametrize("folder", RULE_DIRS, ids=lambda p: p.name)
def test_fix(folder: Path):
    rule = all_rules().by_code[folder.name]
    bad = (folder / "bad.py").read_text()
    fixed = fix_source(bad, str(folder / "bad.py"), select=[rule.code], unsafe_fixes=True)
    if rule.fix_availability is FixAvailability.NONE:
        assert fixed == bad
        assert not (folder / "fixed.py").exists()
        return
    expected = (folder / "fixed.py").read_text()
    assert fixed == expected
    ast.parse(fixed)
    assert fix_source(fixed, str(folder / "fixed.py"), select=[rule.code], unsafe_fixes=True) == fixed
    # The fix removes every finding of its rule.
    assert [f for f in findings(fixed, folder / "fixed.py") if f[1] == rule.code] == []
    if rule.fix_availability is FixAvailability.UNSAFE:
        assert fix_source(bad, str(folder / "bad.py"), select=[rule.code]) == bad, "an unsafe fix applied without --unsafe-fixes"
