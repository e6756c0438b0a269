"""Every rule against its fixtures: exact findings on bad.py, silence on good.py, fixes that round-trip.

A rule's fixtures are in tests/fixtures/<CODE>/ (bad.py, good.py, fixed.py), or, for a rule with
several scripts (the FSDP501 migration), in tests/fixtures/<CODE>/<shape>/ with the same names. A
case with bad.py and no fixed.py is one the fix must leave unchanged (reported for a person).
"""

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
CASES = [folder for rule_dir in RULE_DIRS for folder in [rule_dir, *sorted(p for p in rule_dir.iterdir() if p.is_dir())]
         if (folder / "bad.py").exists() or (folder / "good.py").exists()]
BAD = [folder for folder in CASES if (folder / "bad.py").exists()]
GOOD = [folder for folder in CASES if (folder / "good.py").exists()]


def case_id(folder: Path) -> str:
    return folder.relative_to(FIXTURES).as_posix()


def rule_of(folder: Path):
    return all_rules().by_code[folder.relative_to(FIXTURES).parts[0]]


def selection(rule) -> list[str]:
    """Every default rule; an opt-in rule alone, since its fixtures are scripts to migrate, not bugs
    (an FSDP1 script with no wrap policy also gets FSDP401)."""
    return [rule.code] if rule.opt_in else ["ALL"]


def expected_findings(text: str) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        match = EXPECT.search(line)
        if match:
            found += [(number, code.strip()) for code in match.group("codes").split(",")]
    return sorted(found)


def findings(text: str, path: Path, select: list[str] | None = None) -> list[tuple[int, str]]:
    return sorted((d.line, d.code) for d in check_source(text, str(path), select=select))


def test_every_check_rule_has_fixtures():
    codes = {rule.code for rule in all_rules().rules if not rule.engine_only}
    assert codes <= {rule_of(folder).code for folder in BAD}
    assert codes <= {rule_of(folder).code for folder in GOOD}


@pytest.mark.parametrize("folder", BAD, ids=case_id)
def test_bad_reports_exactly_the_marked_lines(folder: Path):
    rule = rule_of(folder)
    text = (folder / "bad.py").read_text()
    expected = expected_findings(text)
    assert expected, "bad.py marks no finding"
    assert all(code == rule.code for _, code in expected)
    assert findings(text, folder / "bad.py", selection(rule)) == expected


@pytest.mark.parametrize("folder", GOOD, ids=case_id)
def test_good_is_silent(folder: Path):
    assert findings((folder / "good.py").read_text(), folder / "good.py", selection(rule_of(folder))) == []


@pytest.mark.parametrize("folder", BAD, ids=case_id)
def test_fix(folder: Path):
    rule = rule_of(folder)
    bad = (folder / "bad.py").read_text()
    fixed = fix_source(bad, str(folder / "bad.py"), select=[rule.code], unsafe_fixes=True)
    if rule.fix_availability is FixAvailability.NONE or not (folder / "fixed.py").exists():
        assert fixed == bad
        assert not (folder / "fixed.py").exists()
        return
    expected = (folder / "fixed.py").read_text()
    assert fixed == expected
    ast.parse(fixed)
    assert fix_source(fixed, str(folder / "fixed.py"), select=[rule.code], unsafe_fixes=True) == fixed
    # The fix removes every finding of its rule.
    assert [f for f in findings(fixed, folder / "fixed.py", [rule.code]) if f[1] == rule.code] == []
    if rule.fix_availability is FixAvailability.UNSAFE:
        assert fix_source(bad, str(folder / "bad.py"), select=[rule.code]) == bad, "an unsafe fix applied without --unsafe-fixes"
    if rule.opt_in:
        # A codemod's output is clean under the default rules too (a migration must not leave FSDP2 mistakes).
        assert findings(fixed, folder / "fixed.py") == []


@pytest.mark.parametrize("folder", [folder for folder in BAD if (folder / "fixed.py").exists()], ids=case_id)
def test_fix_keeps_the_lines_it_writes_within_the_files_limit(folder: Path):
    bad = (folder / "bad.py").read_text()
    fixed = fix_source(bad, str(folder / "bad.py"), select=[rule_of(folder).code], unsafe_fixes=True)
    limit = max(88, *map(len, bad.splitlines()))
    assert [line for line in set(fixed.splitlines()) - set(bad.splitlines()) if len(line) > limit] == []


def test_opt_in_rules_need_their_code():
    rule = all_rules().by_code["FSDP501"]
    assert rule.opt_in
    bad = (FIXTURES / "FSDP501" / "no_sync" / "bad.py").read_text()
    for selector in (None, ["ALL"], ["FSDP5"], ["FSDP50"]):
        assert findings(bad, Path("bad.py"), selector) == []
    assert findings(bad, Path("bad.py"), ["FSDP501"]) == findings(bad, Path("bad.py"), [rule.name]) != []
