"""What a person sees in a terminal: color only where it belongs, fixes shown as diffs, ruff's summary."""

from __future__ import annotations

import errno
import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import BAD, run

from fsdplint.reporters import color_enabled

ESC = "\x1b["
# FSDP103 has a safe fix, FSDP104 (optimizer built before sharding) only an unsafe one.
SAFE_AND_UNSAFE = """\
import torch
from torch.distributed.fsdp import fully_shard

model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for layer in model:
    fully_shard(layer)
fully_shard(model)
out = model.forward(torch.ones(2))
"""


# fsdplint, showing its progress line however short the run (a test's runs take less than its delay).
PROGRESS_AT_ONCE = ("-c", "import sys, fsdplint.progress; fsdplint.progress.DELAY_SECONDS = 0; from fsdplint.cli import main; main(sys.argv[1:])")


def run_in_terminal(*args: str, cwd: Path, env: dict[str, str] | None = None, launch: tuple[str, ...] = ("-m", "fsdplint")) -> str:
    """Run fsdplint with a pseudo-terminal as its stdout and stderr; what it printed there."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, *launch, *args], cwd=cwd, stdout=terminal, stderr=terminal, env={**os.environ, "TERM": "xterm", **(env or {})})
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError as error:  # EIO: the program exited and closed the terminal
            assert error.errno == errno.EIO
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    assert process.wait(timeout=120) == 1
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "bad.py").write_text(BAD)
    return tmp_path


# color


def test_terminal_gets_color(project):
    shown = run_in_terminal("check", "bad.py", cwd=project)
    assert ESC in shown
    assert "FSDP103" in shown


def test_no_color_in_a_terminal(project):
    shown = run_in_terminal("check", "bad.py", cwd=project, env={"NO_COLOR": "1"})
    assert ESC not in shown
    assert "bad.py:6:7: FSDP103" in shown


def test_machine_formats_are_never_colored(project):
    shown = run_in_terminal("check", "--output-format", "json", "bad.py", cwd=project)
    assert ESC not in shown


def test_piped_output_has_no_color(project):
    assert ESC not in run("check", "bad.py", cwd=project).stdout


def test_force_color_when_piped(project):
    result = run("check", "--output-format", "concise", "bad.py", cwd=project, env={"FORCE_COLOR": "1"})
    assert ESC in result.stdout
    assert result.returncode == 1


@pytest.mark.parametrize(
    ("environment", "terminal", "expected"),
    [
        ({}, True, True),
        ({}, False, False),
        ({"NO_COLOR": "1"}, True, False),
        ({"NO_COLOR": ""}, True, True),  # no-color.org: an empty NO_COLOR is as if unset
        ({"FORCE_COLOR": "1"}, False, True),
        ({"FORCE_COLOR": ""}, False, False),
        ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False, False),  # NO_COLOR wins
        ({"TERM": "dumb"}, True, False),
    ],
)
def test_color_decision(monkeypatch, environment, terminal, expected):
    for name in ("NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    for name, value in environment.items():
        monkeypatch.setenv(name, value)

    class Stream(io.StringIO):
        def isatty(self) -> bool:
            return terminal

    assert color_enabled(Stream()) is expected


# --show-fixes


def test_show_fixes_prints_the_fix_as_a_diff(project):
    plain = run("check", "bad.py", cwd=project)
    shown = run("check", "--show-fixes", "bad.py", cwd=project)
    assert shown.returncode == 1
    assert "Safe fix" in shown.stdout and "Safe fix" not in plain.stdout
    diff = [line for line in shown.stdout.splitlines() if line.endswith(("|-out = model.forward(torch.ones(2))", "|+out = model(torch.ones(2))"))]
    # The removed line is numbered in the file before the fix, the added one in the file after it.
    assert [line.split("|")[0].split() for line in diff] == [["6"], ["6"]]
    assert "5 5 | fully_shard(model)" in shown.stdout  # context
    assert (project / "bad.py").read_text() == BAD


def test_show_fixes_in_color(project):
    shown = run_in_terminal("check", "--show-fixes", "bad.py", cwd=project)
    assert "\x1b[31m-out = model.forward(torch.ones(2))" in shown
    assert "\x1b[32m+out = model(torch.ones(2))" in shown


def test_show_fixes_with_fix_lists_what_was_fixed(project):
    result = run("check", "--output-format", "concise", "--fix", "--show-fixes", "bad.py", cwd=project)
    assert "Fixed 1 error:\n- bad.py:\n    1 × FSDP103 (forward-bypasses-hooks)\n\nFound 2 problems (1 fixed, 1 remaining).\n" in result.stdout


# summary (ruff's wording)


@pytest.mark.parametrize(
    ("args", "summary"),
    [
        ((), "Found 2 errors.\n[*] 1 fixable with the `--fix` option (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"),
        (("--unsafe-fixes",), "Found 2 errors.\n[*] 2 fixable with the `--fix` option.\n"),
        (("--fix",), "Found 2 errors (1 fixed, 1 remaining).\nNo fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"),
        (("--fix", "--unsafe-fixes"), "Found 2 errors (2 fixed, 0 remaining).\n"),
        (("--select", "FSDP101"), "All checks passed!\n"),
        (("--select", "FSDP104,FSDP101"), "Found 1 error.\nNo fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option).\n"),
    ],
)
def test_summary(tmp_path, args, summary):
    (tmp_path / "train.py").write_text(SAFE_AND_UNSAFE)
    result = run("check", "--output-format", "concise", *args, "train.py", cwd=tmp_path)
    assert result.stdout.endswith(summary), result.stdout
    marked = [line.split()[1:3] for line in result.stdout.splitlines() if line.startswith("train.py:")]
    if not args:  # only fixes that `--fix` would apply are marked
        assert marked == [["FSDP104", "the"], ["FSDP103", "[*]"]]
    elif args == ("--unsafe-fixes",):
        assert marked == [["FSDP104", "[*]"], ["FSDP103", "[*]"]]


def test_full_output_leaves_a_blank_line_before_the_summary(project):
    result = run("check", "bad.py", cwd=project)
    assert "\n\nFound 1 error and 1 warning.\n[*] 1 fixable with the `--fix` option.\n" in result.stdout


def test_full_output_underlines_every_line_of_a_span(tmp_path):
    call = "model.forward(\n    torch.ones(2),\n\n    torch.ones(2),\n)\n"
    (tmp_path / "multi.py").write_text(BAD.replace("model.forward(torch.ones(2))\n", call))
    result = run("check", "--no-cache", "--select", "FSDP103", "multi.py", cwd=tmp_path)
    assert result.returncode == 1
    block = result.stdout.split("\n\n")[0].splitlines()
    assert block[0].startswith("multi.py:6:7: FSDP103")
    assert block[1:11] == [
        "   |",
        " 6 | out = model.forward(",
        "   |       ^^^^^^^^^^^^^^",
        " 7 |     torch.ones(2),",
        "   |     ^^^^^^^^^^^^^^",
        " 8 |",  # a blank line of the span is not underlined
        " 9 |     torch.ones(2),",
        "   |     ^^^^^^^^^^^^^^",
        "10 | )",
        "   | ^ forward-bypasses-hooks",
    ]


# progress


def test_a_long_check_shows_progress_on_a_terminal(project):
    (project / "other.py").write_text(BAD)
    for cache in (["--no-cache"], [], []):  # cold, then every file from the cache
        shown = run_in_terminal("check", "--output-format", "concise", *cache, ".", cwd=project, launch=PROGRESS_AT_ONCE, env={"NO_COLOR": "1"})
        line = "\rfsdplint: 2/2 files analyzed"
        assert line in shown, shown
        # Erased before the findings, which are printed whole.
        erased = shown.index(line) + len(line)
        assert shown[erased:].startswith("\r" + " " * (len(line) - 1) + "\r")
        assert "bad.py:6:7: FSDP103" in shown and "other.py:6:7: FSDP103" in shown


def test_no_progress_when_piped_or_quiet(project):
    piped = subprocess.run([sys.executable, *PROGRESS_AT_ONCE, "check", "--no-cache", "bad.py"], cwd=project, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 1 and "files analyzed" not in piped.stderr + piped.stdout
    quiet = run_in_terminal("check", "--no-cache", "-q", "bad.py", cwd=project, launch=PROGRESS_AT_ONCE)
    assert "files analyzed" not in quiet and "FSDP103" in quiet
