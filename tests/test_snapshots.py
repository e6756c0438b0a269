"""Each fixture's complete output, pinned in a snapshot file as ruff pins its own (with insta).

For every fixture folder with a bad.py (tests/fixtures/<CODE>/ or <CODE>/<shape>/), bad.snap beside
it holds what `fsdplint check --no-cache --select <CODE> bad.py` prints, run in that folder (so paths
are short and the same on every machine) with color off: first the `full` format a person reads
(position, code, severity, message, the underlined source, the `= note:` related locations, the
`= help:` fix line and the summary), then the `json` format, which adds end positions and each fix's
edits. Each command's exit code, stdout and stderr are recorded.

The test compares the whole file and fails with a diff. When a change to the output is intended,
rewrite the snapshots, review them with `git diff tests/fixtures` and commit them (as `cargo insta
accept` does):

    FSDPLINT_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest -q tests/test_snapshots.py

A missing snapshot is written on a local run, with a warning to review it; under CI (CI=true) it
fails, since a snapshot written there would be thrown away.
"""

from __future__ import annotations

import difflib
import os
import warnings
from pathlib import Path

import pytest
from test_cli import run
from test_fixtures import BAD, FIXTURES, case_id, rule_of

UPDATE_COMMAND = "FSDPLINT_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest -q tests/test_snapshots.py"
# The default `full` format, then `json`, which adds end positions and each fix's edits.
FORMAT_ARGS = ((), ("--output-format", "json"))
ROOT = FIXTURES.parents[1]


def flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false")


def snapshot_of(folder: Path) -> str:
    """What each format prints for the folder's bad.py, the commands spelled as a user would type them."""
    sections = []
    for format_args in FORMAT_ARGS:
        args = ["check", "--no-cache", "--select", rule_of(folder).code, *format_args, "bad.py"]
        # NO_COLOR wins over a FORCE_COLOR the caller may have set.
        result = run(*args, cwd=folder, env={"NO_COLOR": "1"})
        sections.append(f"$ fsdplint {' '.join(args)}\nexit code: {result.returncode}\n"
                        f"----- stdout -----\n{result.stdout}----- stderr -----\n{result.stderr}")
    return "\n".join(sections)


@pytest.mark.parametrize("folder", BAD, ids=case_id)
def test_output_matches_snapshot(folder: Path):
    snapshot = folder / "bad.snap"
    name = snapshot.relative_to(ROOT).as_posix()
    actual = snapshot_of(folder)
    expected = snapshot.read_text() if snapshot.exists() else None
    if actual == expected:
        return
    if flag("FSDPLINT_UPDATE_SNAPSHOTS"):
        snapshot.write_text(actual)
        return
    if expected is None:
        if flag("CI"):
            pytest.fail(f"no snapshot {name}; write it with `{UPDATE_COMMAND}`, review it and commit it", pytrace=False)
        snapshot.write_text(actual)
        warnings.warn(f"wrote the new snapshot {name}: review it and commit it")
        return
    diff = difflib.unified_diff(expected.splitlines(keepends=True), actual.splitlines(keepends=True), name, "now")
    pytest.fail(f"the output differs from its snapshot:\n{''.join(diff)}\nIf the change is intended: `{UPDATE_COMMAND}`", pytrace=False)
