"""The machine-read output formats, produced by the real command and read as their consumers read them."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_cli import BAD, CLEAN, UNSAFE, run

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


def test_sarif_without_findings_is_valid(tmp_path):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (pip install -e '.[test]')")
    schema = json.loads((DATA / "sarif-schema-2.1.0.json").read_text())
    (tmp_path / "clean.py").write_text(CLEAN)
    result = run("check", "--output-format", "sarif", ".", cwd=tmp_path)
    assert result.returncode == 0
    jsonschema.validate(json.loads(result.stdout), schema)


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
