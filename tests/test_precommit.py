"""The hooks in .pre-commit-hooks.yaml, run for real with `pre-commit try-repo`.

try-repo clones this checkout (HEAD plus uncommitted changes to tracked files) and builds the hook
environment with pip, so this needs the package index; it is slow (one environment per test run).
`pre-commit autoupdate` pins the README's config to this checkout's HEAD (no index needed).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pre_commit", reason="pre-commit is not installed (pip install -e '.[test]')")

REPO = Path(__file__).resolve().parents[1]
BAD = """\
import torch
from torch.distributed.fsdp import fully_shard

model = torch.nn.Sequential(torch.nn.Linear(2, 2))
fully_shard(model)
out = model.forward(torch.ones(2))
"""
CLEAN = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    # One pre-commit cache for the module, so the hook environment is built once.
    return tmp_path_factory.mktemp("pre-commit-home")


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    for name, text in files.items():
        (project / name).write_text(text)
    for command in (["init", "-q"], ["config", "user.email", "t@example.com"], ["config", "user.name", "t"], ["add", "."]):
        subprocess.run(["git", *command], cwd=project, check=True, capture_output=True)
    return project


def _pre_commit(project: Path, home: Path, *arguments: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(home),
        "PRE_COMMIT_HOME": str(home / "cache"),
    }
    for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_CONFIG_FILE", "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        if key in os.environ:
            env[key] = os.environ[key]
    return subprocess.run([sys.executable, "-m", "pre_commit", *arguments], cwd=project, env=env, capture_output=True, text=True, timeout=900)


def _try_repo(project: Path, home: Path, hook: str, *files: str) -> subprocess.CompletedProcess:
    return _pre_commit(project, home, "try-repo", str(REPO), hook, "--files", *files)


@pytest.fixture(autouse=True)
def _need_git():
    if shutil.which("git") is None:
        pytest.skip("git is not installed")


def test_check_hook_fails_on_bad_file(tmp_path, home):
    project = _project(tmp_path, {"bad.py": BAD})
    result = _try_repo(project, home, "fsdplint", "bad.py")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "FSDP103" in output
    assert "Traceback" not in output
    assert (project / "bad.py").read_text() == BAD


def test_fix_hook_rewrites_forward_call(tmp_path, home):
    project = _project(tmp_path, {"bad.py": BAD})
    result = _try_repo(project, home, "fsdplint-fix", "bad.py")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output  # files were modified (and FSDP101 remains)
    fixed = (project / "bad.py").read_text()
    assert "model(torch.ones(2))" in fixed
    assert "model.forward(" not in fixed


def test_check_hook_passes_clean_file(tmp_path, home):
    project = _project(tmp_path, {"clean.py": CLEAN})
    result = _try_repo(project, home, "fsdplint", "clean.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Passed" in result.stdout


def test_autoupdate_pins_the_readme_config(tmp_path, home):
    # The README's config, with this checkout for the repository: `pre-commit autoupdate` replaces
    # `rev: main` with the commit's sha (or the newest tag, once there is one), as the README says.
    config = re.search(r"```yaml\n(repos:\n.+?)```", (REPO / "README.md").read_text(), re.S).group(1)
    assert "rev: main" in config
    project = _project(tmp_path, {".pre-commit-config.yaml": config.replace("https://github.com/fsdplint/fsdplint", str(REPO))})
    result = _pre_commit(project, home, "autoupdate")
    assert result.returncode == 0, result.stdout + result.stderr
    (rev,) = re.findall(r"rev: (\S+)", (project / ".pre-commit-config.yaml").read_text())
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    tags = subprocess.run(["git", "-C", str(REPO), "tag"], capture_output=True, text=True, check=True).stdout.split()
    assert rev == head or rev in tags
