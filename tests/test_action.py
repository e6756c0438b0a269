"""The GitHub Action in action.yml, run step by step as a runner runs a composite action.

The install step really installs this checkout into a new virtual environment with pip (once for
the module, a few seconds with pip's cache; it needs the package index, as tests/test_precommit.py
does); the lint step then runs with the inputs a workflow would give.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from test_cli import BAD, CLEAN

yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (pip install -e '.[test]')")

REPO = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((REPO / "action.yml").read_text())
EXPRESSION = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")


def _evaluate(text: str, inputs: dict[str, str]) -> str:
    def value(match: re.Match) -> str:
        name = match.group(1)
        if name == "github.action_path":
            return str(REPO)
        assert name.startswith("inputs.") and name[len("inputs."):] in inputs, f"action.yml uses an unknown expression: {name}"
        return inputs[name[len("inputs."):]]

    return EXPRESSION.sub(value, text)


def run_step(index: int, given: dict[str, str], runner_temp: Path, workspace: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run step `index` the way the runner does (`bash -eo pipefail`); the GITHUB_ENV it wrote goes into `env`."""
    inputs = {name: str(spec.get("default", "")) for name, spec in ACTION["inputs"].items()}
    unknown = set(given) - set(inputs)
    assert not unknown, f"not inputs of action.yml: {unknown}"
    inputs.update(given)
    step = ACTION["runs"]["steps"][index]
    assert step["shell"] == "bash"
    github_env = runner_temp / "github_env"
    github_env.write_text("")
    step_env = {name: _evaluate(str(value), inputs) for name, value in step.get("env", {}).items()}
    script = runner_temp / f"step{index}.sh"
    script.write_text(_evaluate(step["run"], inputs))
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
        cwd=workspace, capture_output=True, text=True, timeout=300,
        env={**os.environ, **env, **step_env, "RUNNER_TEMP": str(runner_temp), "GITHUB_ENV": str(github_env), "GITHUB_WORKSPACE": str(workspace)},
    )
    env.update(line.split("=", 1) for line in github_env.read_text().splitlines() if "=" in line)
    return result


def test_action_is_composite_with_documented_inputs():
    assert ACTION["runs"]["using"] == "composite"
    assert set(ACTION["inputs"]) == {"src", "args", "output-format", "output-file", "version"}
    assert all(spec.get("description") for spec in ACTION["inputs"].values())


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The install step with the default inputs: this checkout in a fresh virtual environment."""
    runner_temp = tmp_path_factory.mktemp("runner-temp")
    env: dict[str, str] = {}
    result = run_step(0, {}, runner_temp, runner_temp, env)
    assert result.returncode == 0, result.stderr
    assert Path(env["FSDPLINT"]).is_file()
    return runner_temp, env


def _workspace(tmp_path: Path, text: str) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(text)
    return tmp_path


def test_lint_step_annotates_findings(installed, tmp_path):
    runner_temp, env = installed
    result = run_step(1, {}, runner_temp, _workspace(tmp_path, BAD), dict(env))
    assert result.returncode == 1  # fails the job
    assert any(line.startswith("::error ") and "file=src/train.py,line=6," in line and "FSDP103" in line for line in result.stdout.splitlines())


def test_lint_step_passes_on_clean_code(installed, tmp_path):
    runner_temp, env = installed
    result = run_step(1, {}, runner_temp, _workspace(tmp_path, CLEAN), dict(env))
    assert result.returncode == 0
    assert result.stdout == ""


def test_lint_step_inputs(installed, tmp_path):
    runner_temp, env = installed
    workspace = _workspace(tmp_path, BAD)
    (workspace / "other").mkdir()
    (workspace / "other" / "skipped.py").write_text(BAD)
    inputs = {"src": "src", "args": "--select FSDP103 --exit-zero", "output-format": "sarif", "output-file": "fsdplint.sarif"}
    result = run_step(1, inputs, runner_temp, workspace, dict(env))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    results = json.loads((workspace / "fsdplint.sarif").read_text())["runs"][0]["results"]
    assert [(item["ruleId"], item["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]) for item in results] == [("FSDP103", "src/train.py")]
