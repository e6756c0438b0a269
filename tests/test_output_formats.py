"""The machine-read output formats, produced by the real command and read as their consumers read them."""

from __future__ import annotations

import itertools
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_cli import BAD, CLEAN, UNSAFE, run

from fsdplint.api import fix_source

DATA = Path(__file__).parent / "data"
SYNTAX_ERROR = "def broken(:\n    fully_shard(model)\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """Findings of every kind: a safe fix, an unsafe fix, none, and a file that does not parse."""
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "unsafe.py").write_text(UNSAFE)
    (tmp_path / "broken.py").write_text(SYNTAX_ERROR)
    return tmp_path


def test_sarif_is_valid_sarif_2_1_0(project):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (pip install -e '.[test]')")
    schema = json.loads((DATA / "sarif-schema-2.1.0.json").read_text())
    result = run("check", "--output-format", "sarif", ".", cwd=project)
    assert result.returncode == 1
    document = json.loads(result.stdout)
    validator = jsonschema.validators.validator_for(schema)(schema, format_checker=jsonschema.FormatChecker())
    errors = sorted(validator.iter_errors(document), key=lambda error: list(error.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    results = document["runs"][0]["results"]
    rules = document["runs"][0]["tool"]["driver"]["rules"]
    assert {item["ruleId"] for item in results} >= {"FSDP001", "FSDP103", "FSDP104"}
    assert all(rules[item["ruleIndex"]]["id"] == item["ruleId"] for item in results)
    # Each fix, applied as a SARIF consumer applies it, is the fix `--fix` makes.
    fixed = {item["ruleId"]: item["fixes"] for item in results if "fixes" in item}
    assert set(fixed) == {"FSDP103", "FSDP104"}
    for code, path, text in (("FSDP103", "bad.py", BAD), ("FSDP104", "unsafe.py", UNSAFE)):
        [fix] = fixed[code]
        [change] = fix["artifactChanges"]
        assert change["artifactLocation"]["uri"] == path
        edits = [(r["deletedRegion"]["startLine"], r["deletedRegion"]["startColumn"], r["deletedRegion"]["endLine"],
                  r["deletedRegion"]["endColumn"], r["insertedContent"]["text"]) for r in change["replacements"]]
        assert apply(text, edits) == fix_source(text, path, select=[code], unsafe_fixes=True)
    assert fixed["FSDP104"][0]["properties"]["applicability"] == "unsafe" and "unsafe" in fixed["FSDP104"][0]["description"]["text"]


def test_sarif_without_findings_is_valid(tmp_path):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (pip install -e '.[test]')")
    schema = json.loads((DATA / "sarif-schema-2.1.0.json").read_text())
    (tmp_path / "clean.py").write_text(CLEAN)
    result = run("check", "--output-format", "sarif", ".", cwd=tmp_path)
    assert result.returncode == 0
    jsonschema.validate(json.loads(result.stdout), schema)


def apply(text: str, edits: list[tuple[int, int, int, int, str]]) -> str:
    """`text` with edits (1-based start and exclusive end line:column, new text) applied, as a tool reading them would."""
    starts = [0, *itertools.accumulate(len(line) for line in text.splitlines(keepends=True))]
    for line, column, end_line, end_column, content in sorted(edits, reverse=True):
        start, end = starts[line - 1] + column - 1, starts[end_line - 1] + end_column - 1
        text = text[:start] + content + text[end:]
    return text


def test_json_fixes_carry_their_edits_also_from_the_cache(project):
    def findings() -> tuple[list[dict], str]:
        result = run("check", "--output-format", "json", "-v", ".", cwd=project)
        assert result.returncode == 1
        return json.loads(result.stdout), result.stderr

    first, _ = findings()
    again, verbose = findings()
    assert "3 served from the cache" in verbose
    assert again == first
    fixes = {(item["filename"], item["code"]): item["fix"] for item in first if item["fix"]}
    assert set(fixes) == {("bad.py", "FSDP103"), ("unsafe.py", "FSDP104")}
    for (path, code), text in ((("bad.py", "FSDP103"), BAD), (("unsafe.py", "FSDP104"), UNSAFE)):
        edits = [(e["location"]["row"], e["location"]["column"], e["end_location"]["row"], e["end_location"]["column"], e["content"])
                 for e in fixes[path, code]["edits"]]
        assert apply(text, edits) == fix_source(text, path, select=[code], unsafe_fixes=True)
    assert fixes["bad.py", "FSDP103"]["edits"] == [
        {"content": "", "location": {"row": 6, "column": 12}, "end_location": {"row": 6, "column": 20}}]  # `.forward` deleted


def test_junit_parses_with_one_failed_case_per_finding(project):
    result = run("check", "--output-format", "junit", ".", cwd=project)
    assert result.returncode == 1
    assert result.stdout.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    root = ET.fromstring(result.stdout.encode())
    assert root.tag == "testsuites" and root.get("name") == "fsdplint"
    suites = {suite.get("name"): suite for suite in root.iter("testsuite")}
    assert set(suites) == {"bad.py", "broken.py", "unsafe.py"}
    cases = list(root.iter("testcase"))
    assert root.get("tests") == root.get("failures") == str(len(cases))
    assert all(int(suite.get("failures")) == len(suite.findall("testcase")) for suite in suites.values())
    forward = next(case for case in suites["bad.py"].iter("testcase") if case.get("name") == "org.fsdplint.FSDP103")
    assert (forward.get("classname"), forward.get("line"), forward.get("column")) == ("bad", "6", "7")
    failure = forward.find("failure")
    assert failure.text == f"line 6, col 7, {failure.get('message')}"
    assert "forward" in failure.get("message")
    assert forward.find("properties/property[@name='severity']").get("value") == "error"


def test_junit_without_findings_is_one_passing_case(tmp_path):
    (tmp_path / "clean.py").write_text(CLEAN)
    result = run("check", "--output-format", "junit", ".", cwd=tmp_path)
    assert result.returncode == 0
    root = ET.fromstring(result.stdout.encode())
    (case,) = root.iter("testcase")
    assert case.get("name") == "No errors found" and case.find("failure") is None
    assert (root.get("tests"), root.get("failures")) == ("1", "0")


def _gitlab(project: Path, *paths: str, env: dict[str, str] | None = None) -> list[dict]:
    result = run("check", "--output-format", "gitlab", *paths, cwd=project, env=env)
    assert result.returncode == 1
    return json.loads(result.stdout)


def test_gitlab_code_quality_shape(project):
    issues = _gitlab(project, ".")
    assert {issue["check_name"] for issue in issues} >= {"FSDP001", "FSDP101", "FSDP103", "FSDP104"}
    for issue in issues:
        assert set(issue) == {"description", "check_name", "fingerprint", "severity", "location"}
        assert issue["description"].startswith(f"{issue['check_name']}: ")
        assert issue["severity"] in {"info", "minor", "major", "critical", "blocker"}
        assert isinstance(issue["location"]["path"], str) and not issue["location"]["path"].startswith("/")
        assert isinstance(issue["location"]["lines"]["begin"], int) and issue["location"]["lines"]["begin"] >= 1
    assert len({issue["fingerprint"] for issue in issues}) == len(issues)
    forward = next(issue for issue in issues if issue["check_name"] == "FSDP103")
    assert forward["location"] == {"path": "bad.py", "lines": {"begin": 6, "end": 6}}
    assert forward["severity"] == "major"
    assert next(issue for issue in issues if issue["check_name"] == "FSDP101")["severity"] == "minor"  # a warning


def test_gitlab_fingerprints_survive_moved_lines(project):
    before = {issue["fingerprint"]: issue["location"]["lines"]["begin"] for issue in _gitlab(project, "bad.py")}
    (project / "bad.py").write_text('"""A docstring and a blank line move every finding down."""\n\n' + BAD)
    after = {issue["fingerprint"]: issue["location"]["lines"]["begin"] for issue in _gitlab(project, "bad.py")}
    assert set(after) == set(before)
    assert all(after[fingerprint] == line + 2 for fingerprint, line in before.items())


def test_gitlab_fingerprint_of_a_file_that_did_not_parse_follows_its_line(project):
    def fingerprint() -> str:
        (issue,) = _gitlab(project, "broken.py")
        return issue["fingerprint"]

    first = fingerprint()
    (project / "broken.py").write_text("\n" + SYNTAX_ERROR)
    assert fingerprint() == first  # moved, still the same finding
    (project / "broken.py").write_text(SYNTAX_ERROR.replace("broken", "other"))
    assert fingerprint() != first  # another line, another finding


def test_gitlab_paths_are_relative_to_the_project(project):
    issues = _gitlab(project, str(project / "bad.py"), env={"CI_PROJECT_DIR": str(project)})
    assert {issue["location"]["path"] for issue in issues} == {"bad.py"}


def test_pylint(project):
    result = run("check", "--output-format", "pylint", "bad.py", cwd=project)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert any(line.startswith("bad.py:6: [FSDP103] ") for line in lines)
    assert all(line.startswith("bad.py:") and ": [FSDP" in line for line in lines)
    assert "Found" not in result.stdout  # a machine format: no summary


# The program of issue 13, one helper a file: `build_optimizer` is right, and the caller calls it
# before `apply_fsdp`; `evaluate` runs the forward without FSDP's hooks, reached through a call.
HELPERS = {
    "optim.py": """\
import torch


def build_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3)
""",
    "parallel.py": """\
from torch.distributed.fsdp import fully_shard


def apply_fsdp(model):
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
""",
    "evaluation.py": """\
def evaluate(model, batch):
    return model.forward(batch)
""",
    "train.py": """\
from evaluation import evaluate
from optim import build_optimizer
from parallel import apply_fsdp


def main(model, batches):
    optimizer = build_optimizer(model)
    apply_fsdp(model)
    for batch in batches:
        model(batch).sum().backward()
        optimizer.step()
    evaluate(model, batches[0])
""",
}
# (file, line, column, message) of each related location, in order.
OPTIMIZER_RELATED = [("optim.py", 5, 12, "optimizer built here"), ("parallel.py", 6, 9, "sharded here")]
FORWARD_RELATED = [("parallel.py", 7, 5, "sharded here"), ("train.py", 12, 5, "`evaluate` called here")]


@pytest.fixture
def helpers(tmp_path: Path) -> Path:
    for name, text in HELPERS.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_json_related_locations_also_from_the_cache(helpers):
    def findings() -> tuple[dict[str, dict], str]:
        result = run("check", "--output-format", "json", "-v", ".", cwd=helpers)
        assert result.returncode == 1
        return {item["code"]: item for item in json.loads(result.stdout)}, result.stderr

    first, _ = findings()
    again, verbose = findings()
    assert "served from the cache" in verbose
    assert again == first
    assert set(first) == {"FSDP103", "FSDP104"}
    # Where the user must change the code: the caller's call of the helper, not the helper's line.
    optimizer = first["FSDP104"]
    assert (optimizer["filename"], optimizer["location"], optimizer["end_location"]) == ("train.py", {"row": 7, "column": 17}, {"row": 7, "column": 39})
    related = [(r["filename"], r["location"]["row"], r["location"]["column"], r["message"]) for r in optimizer["related"]]
    assert related == OPTIMIZER_RELATED
    assert optimizer["related"][0]["end_location"] == {"row": 5, "column": 58}
    forward = first["FSDP103"]
    assert (forward["filename"], forward["location"]) == ("evaluation.py", {"row": 2, "column": 12})
    assert [(r["filename"], r["location"]["row"], r["location"]["column"], r["message"]) for r in forward["related"]] == FORWARD_RELATED


def test_sarif_related_locations_are_valid_sarif(helpers):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (pip install -e '.[test]')")
    schema = json.loads((DATA / "sarif-schema-2.1.0.json").read_text())
    document = json.loads(run("check", "--output-format", "sarif", ".", cwd=helpers).stdout)
    jsonschema.validate(document, schema)
    results = {result["ruleId"]: result for result in document["runs"][0]["results"]}
    for code, expected in (("FSDP104", OPTIMIZER_RELATED), ("FSDP103", FORWARD_RELATED)):
        locations = results[code]["relatedLocations"]
        assert [location["id"] for location in locations] == list(range(len(expected)))
        assert [(location["physicalLocation"]["artifactLocation"]["uri"], location["physicalLocation"]["region"]["startLine"],
                 location["physicalLocation"]["region"]["startColumn"], location["message"]["text"]) for location in locations] == expected
    assert results["FSDP104"]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "train.py"


def test_full_shows_related_locations_as_notes_and_concise_does_not(helpers):
    full = run("check", "--no-cache", "--output-format", "full", "train.py", "optim.py", "parallel.py", "evaluation.py", cwd=helpers).stdout
    block = next(block for block in full.split("\n\n") if "FSDP104" in block).splitlines()
    assert block[0].startswith("train.py:7:17: FSDP104 [error] `build_optimizer(...)` builds the optimizer before `fully_shard`")
    assert [line for line in block if "= note:" in line] == [
        "  = note: optim.py:5:12: optimizer built here",
        "  = note: parallel.py:6:9: sharded here",
    ]
    concise = run("check", "--no-cache", "--output-format", "concise", ".", cwd=helpers).stdout
    assert "note" not in concise and "optimizer built here" not in concise
