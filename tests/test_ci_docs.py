"""The CI recipes in docs/ci.md and the README are real: the workflows give the action only inputs
it has, and the GitLab job's commands, run as GitLab runs them, leave the reports its artifacts name."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_cli import BAD

yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (pip install -e '.[test]')")

ROOT = Path(__file__).parent.parent
BLOCKS = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.+?)```", (ROOT / "docs" / "ci.md").read_text(), re.S)]
README_BLOCKS = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.+?)```", (ROOT / "README.md").read_text(), re.S)]
ACTION_INPUTS = set(yaml.safe_load((ROOT / "action.yml").read_text())["inputs"])


def _action_steps(blocks: list) -> list[dict]:
    """Steps that use the action, in whole workflows or in bare lists of steps."""
    steps = []
    for block in blocks:
        if isinstance(block, dict) and "jobs" in block:
            steps += [step for job in block["jobs"].values() for step in job["steps"]]
        elif isinstance(block, list):
            steps += [step for step in block if isinstance(step, dict)]
    return [step for step in steps if step.get("uses", "").startswith("fsdplint/fsdplint@")]


@pytest.mark.parametrize("blocks", [BLOCKS, README_BLOCKS], ids=["docs/ci.md", "README.md"])
def test_workflows_use_the_action_with_its_inputs(blocks):
    steps = _action_steps(blocks)
    assert steps
    for step in steps:
        assert set(step.get("with", {})) <= ACTION_INPUTS


def test_gitlab_job_writes_its_reports(tmp_path):
    (job,) = [block["fsdplint"] for block in BLOCKS if isinstance(block, dict) and "fsdplint" in block]
    (tmp_path / "train.py").write_text(BAD)
    # GitLab runs the script's lines in one shell and stops at the first that fails. fsdplint is
    # already installed here: the `pip install` line is skipped, the checkout's own command used.
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "fsdplint").exists(), "the fsdplint command is not installed next to this Python"
    commands = [line for line in job["script"] if not line.startswith("pip install")]
    assert commands and all(line.startswith("fsdplint ") for line in commands)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "CI_PROJECT_DIR": str(tmp_path)}
    result = subprocess.run(["sh", "-e", "-c", "\n".join(commands)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1  # the findings fail the job, after both reports are written
    reports = job["artifacts"]["reports"]
    assert job["artifacts"]["when"] == "always"
    issues = json.loads((tmp_path / reports["codequality"]).read_text())
    assert {issue["check_name"] for issue in issues} == {"FSDP101", "FSDP103"}
    assert all(issue["location"]["path"] == "train.py" for issue in issues)
    suites = ET.parse(tmp_path / reports["junit"]).getroot()
    assert suites.get("failures") == "2"
