"""Which files a run checks.

Directories are walked recursively, skipping VCS folders, virtual environments, build output,
anything `.gitignore` ignores and anything `exclude` names. A file named on the command line is
always checked, unless `--force-exclude` (what pre-commit passes) applies `exclude` to it too.
`.gitignore` matching uses pathspec, which implements git's wildmatch rules exactly.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pathspec

DEFAULT_EXCLUDES = [
    ".git", ".hg", ".svn", ".bzr", ".venv", "venv", ".env", "env", "__pypackages__", ".tox", ".nox",
    "build", "dist", "site-packages", "node_modules", ".mypy_cache", ".ruff_cache", ".pytest_cache",
    "__pycache__", ".eggs", "*.egg-info", ".fsdplint_cache",
]

_DEFAULT_FOLDERS = frozenset(DEFAULT_EXCLUDES) - {"*.egg-info"}  # that one is matched by its suffix


class DiscoveryError(Exception):
    """A path on the command line that cannot be checked."""


@dataclass(frozen=True)
class Candidate:
    path: Path
    display: str


def _spec(patterns: list[str]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(patterns)


@dataclass(frozen=True)
class _GitIgnore:
    folders: pathspec.PathSpec  # every pattern
    # The patterns that may match a Python file: not those of folders only (`build/`: the walk does not
    # enter an ignored folder), nor those of another extension (`*.pyc`, `*.so`); negations always.
    python_files: pathspec.PathSpec


_OTHER_EXTENSION = re.compile(r"\.(?!pyi?$)[A-Za-z0-9_]+$")


def _gitignore(folder: Path) -> _GitIgnore | None:
    file = folder / ".gitignore"
    if not file.is_file():
        return None
    try:
        lines = file.read_text(errors="replace").splitlines()
    except OSError:
        return None
    kept = [line for line in lines if line.lstrip().startswith("!")
            or not (line.rstrip().endswith("/") or _OTHER_EXTENSION.search(line.rstrip()))]
    return _GitIgnore(_spec(lines), _spec(kept))


def _display(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)


def discover(paths: list[Path], exclude: list[str], project_root: Path, force_exclude: bool) -> list[Candidate]:
    # The default excludes name folders (and `*.egg-info`) at any depth: a folder is matched by its
    # name, and no `.py` file matches them. Paths are matched against the user's patterns only when there are some.
    excluded = _spec(exclude) if exclude else None
    root = project_root.as_posix()

    def is_excluded(path: Path, is_dir: bool | None = None) -> bool:
        if is_dir is None:
            is_dir = path.is_dir()
        if is_dir and (path.name in _DEFAULT_FOLDERS or path.name.endswith(".egg-info")):
            return True
        if excluded is None:
            return False
        absolute = os.path.abspath(path).replace(os.sep, "/")
        relative = absolute[len(root) + 1:] if absolute.startswith(root + "/") else absolute.lstrip("/")
        suffix = "/" if is_dir else ""
        return excluded.match_file(path.name + suffix) or excluded.match_file(relative + suffix)

    found: dict[str, Candidate] = {}
    for given in paths:
        if not given.exists() and not given.is_symlink():
            raise DiscoveryError(f"{given}: no such file or directory")
        if given.is_file() or (given.is_symlink() and not given.is_dir()):
            if not (force_exclude and is_excluded(given)):
                found.setdefault(os.path.abspath(given).replace(os.sep, "/"), Candidate(given, _display(given)))
            continue
        if force_exclude and is_excluded(given):
            continue
        _walk(given, is_excluded, found)
    return sorted(found.values(), key=lambda candidate: candidate.display)


def _walk(root: Path, is_excluded, found: dict[str, Candidate]) -> None:
    seen_folders: set[tuple[int, int]] = set()
    ignores: list[tuple[str, _GitIgnore]] = []  # (absolute folder + "/", its .gitignore)
    cwd = os.getcwd()

    def ignored_by_git(absolute: str, is_dir: bool) -> bool:
        for base, ignore in ignores:
            if is_dir:
                if absolute.startswith(base) and ignore.folders.match_file(absolute[len(base):] + "/"):
                    return True
            elif absolute.startswith(base) and ignore.python_files.match_file(absolute[len(base):]):
                return True
        return False

    for folder, dirnames, filenames in os.walk(root, followlinks=True):
        try:
            stat = os.stat(folder)
        except OSError:
            dirnames[:] = []
            continue
        if (stat.st_dev, stat.st_ino) in seen_folders:  # a symlink loop
            dirnames[:] = []
            continue
        seen_folders.add((stat.st_dev, stat.st_ino))
        here = Path(folder)
        absolute_folder = os.path.normpath(os.path.join(cwd, folder)).replace(os.sep, "/")
        display_folder = _display(here)
        spec = _gitignore(here)
        if spec is not None:
            ignores.append((absolute_folder.rstrip("/") + "/", spec))
        dirnames[:] = sorted(
            name for name in dirnames
            if not is_excluded(here / name, True) and not ignored_by_git(f"{absolute_folder}/{name}", True)
        )
        for name in filenames:
            if not name.endswith((".py", ".pyi")):
                continue
            path = here / name
            if is_excluded(path, False) or ignored_by_git(f"{absolute_folder}/{name}", False):
                continue
            found.setdefault(f"{absolute_folder}/{name}", Candidate(path, os.path.normpath(os.path.join(display_folder, name))))
