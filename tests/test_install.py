"""Installs as a user meets them: fsdplint is not on PyPI, so every documented `pip install` must
work without it, and the wheel, installed anywhere, must lint and verify on its own.

The sdist and the wheel are built from this checkout with `python -m build` (the wheel from the
sdist, as pip would from a source release), with this environment's setuptools: nothing is
downloaded. The wheel goes into a fresh virtual environment that borrows this one's dependencies
(libcst, torch, ...) through a .pth file; its own site-packages comes first, so the fsdplint it runs
is the wheel's. The commands run from a folder outside the checkout.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from test_cli import BAD

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
# Up to a comment, a `&&`, the end of the inline code or of the line.
PIP_INSTALL = re.compile(r"pip install ((?:(?!\s#|&&)[^`\n])+)")
FROM_REPOSITORY = re.compile(r"fsdplint(?:\[([a-z,]+)\])? @ git\+https://github\.com/fsdplint/fsdplint")
FROM_CHECKOUT = re.compile(r"\.(?:\[([a-z,]+)\])?")


def _documented_installs() -> list[tuple[str, str]]:
    return [(document.relative_to(ROOT).as_posix(), match.group(1).strip())
            for document in DOCUMENTS for match in PIP_INSTALL.finditer(document.read_text())]


@pytest.mark.parametrize(("document", "arguments"), _documented_installs())
def test_documented_installs_need_no_pypi(document: str, arguments: str):
    # fsdplint installs from its repository, or editable from a checkout; other packages (torch,
    # flake8) come from PyPI as usual.
    words = shlex.split(arguments)
    for before, word in zip(["", *words], words):
        if before == "-e":
            match = FROM_CHECKOUT.fullmatch(word)
        elif word.startswith("fsdplint"):
            match = FROM_REPOSITORY.fullmatch(word)
        else:
            continue
        assert match, f"{document}: `pip install {arguments}` needs PyPI, where fsdplint is not"
        assert set((match.group(1) or "").split(",")) - {""} <= EXTRAS, f"{document}: unknown extra in `{word}`"


def test_documented_revisions_exist():
    # The pre-commit `rev:` and the Action's `@ref`: the main branch, or a tag this repository has.
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    tags = subprocess.run(["git", "-C", str(ROOT), "tag"], capture_output=True, text=True, check=True).stdout.split()
    for document in DOCUMENTS:
        text = document.read_text()
        refs = [*re.findall(r"uses: fsdplint/fsdplint@(\S+)", text), *re.findall(r"repo: https://github\.com/fsdplint/fsdplint\n\s+rev: (\S+)", text)]
        for ref in refs:
            assert ref in {"main", *tags}, f"{document.relative_to(ROOT)}: {ref} is neither the main branch nor a tag"


@pytest.fixture(scope="module")
def wheel_bin(tmp_path_factory) -> Path:
    """The bin folder of a fresh virtual environment where the wheel built from this checkout is installed."""
    pytest.importorskip("build", reason="build is not installed (pip install -e '.[test]')")
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = dist.glob("fsdplint-*.whl")
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # This environment's pip installs into the new one; --no-deps, as the dependencies are borrowed below.
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-index", "--no-deps", str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    own_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    borrowed = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(own_site) / "borrowed_dependencies.pth").write_text("".join(f"{path}\n" for path in borrowed))
    # From the venv's folder: `python -c` puts the current folder, here the checkout, first on the path.
    where = subprocess.run([str(python), "-c", "import fsdplint; print(fsdplint.__file__)"], cwd=venv, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(own_site), f"fsdplint is not the wheel's: {where.stdout}"
    return venv / "bin"


def _run(command: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_wheel_lints_outside_the_checkout(wheel_bin: Path, tmp_path: Path):
    (tmp_path / "train.py").write_text(BAD)
    result = _run([str(wheel_bin / "fsdplint"), "check", "--output-format", "concise", "train.py"], tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "train.py:6:7: FSDP103" in result.stdout


def test_the_wheel_verifies_with_the_fixtures_it_ships(wheel_bin: Path, tmp_path: Path):
    pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[verify]')")
    result = _run([str(wheel_bin / "fsdplint"), "verify", "--device", "cpu", "--rule", "FSDP103"], tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"Verifying 1 case\(s\) from \S+/site-packages/fsdplint/fixtures ", result.stdout), result.stdout
    assert "1/1 passed" in result.stdout
    # --fixtures still names a folder of the user's own (here one with no verify.toml).
    (tmp_path / "mine").mkdir()
    result = _run([str(wheel_bin / "fsdplint"), "verify", "--device", "cpu", "--fixtures", "mine"], tmp_path)
    assert result.returncode == 2
    assert "no */verify.toml under mine" in result.stderr and "Traceback" not in result.stderr
