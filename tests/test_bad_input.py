"""Hostile or unusual input: fsdplint reports it or skips it, never crashes, never loses bytes."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

BAD = """\
import torch
from torch.distributed.fsdp import fully_shard

model = torch.nn.Sequential(torch.nn.Linear(2, 2))
fully_shard(model)
out = model.forward(torch.ones(2))
"""
FIXED = BAD.replace("model.forward(", "model(")
NO_SYNC = """\
import torch
from torch.distributed.fsdp import fully_shard

model = torch.nn.Sequential(torch.nn.Linear(2, 2))
fully_shard(model)
x = torch.ones(2)
with model.no_sync():
    loss = model(x)
"""


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "fsdplint", "check", "--output-format", "concise", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr
    assert result.returncode >= 0, f"killed by signal {-result.returncode}"
    return result


def test_syntax_error_reported_and_other_files_still_checked(tmp_path):
    (tmp_path / "broken.py").write_text("from torch.distributed.fsdp import fully_shard\n\ndef f(:\n    pass\n")
    (tmp_path / "bad.py").write_text(BAD)
    result = run(".", cwd=tmp_path)
    assert result.returncode == 1
    assert any(line.startswith("broken.py:3:") and "FSDP001" in line for line in result.stdout.splitlines()), result.stdout
    assert "bad.py:6:7: FSDP103" in result.stdout


def test_nul_bytes(tmp_path):
    (tmp_path / "nul.py").write_bytes(b"x = 1\x00\n")
    result = run("nul.py", cwd=tmp_path)
    assert result.returncode == 1
    assert "nul.py:1:1: FSDP002" in result.stdout


def test_non_utf8_without_cookie(tmp_path):
    (tmp_path / "latin.py").write_bytes(b'x = "\xe9"\n')
    result = run("latin.py", cwd=tmp_path)
    assert result.returncode == 1
    assert "latin.py:1:1: FSDP002" in result.stdout


def test_latin1_with_cookie_checked_and_fix_keeps_encoding(tmp_path):
    text = "# -*- coding: latin-1 -*-\n" + BAD + 'name = "caf\xe9"\n'
    path = tmp_path / "latin.py"
    path.write_bytes(text.encode("latin-1"))
    assert "FSDP103" in run("latin.py", cwd=tmp_path).stdout
    result = run("--fix", "--select", "FSDP103", "latin.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert path.read_bytes() == text.replace("model.forward(", "model(").encode("latin-1")


def test_utf8_bom_kept(tmp_path):
    path = tmp_path / "bom.py"
    path.write_bytes(b"\xef\xbb\xbf" + BAD.encode())
    result = run("--fix", "--select", "FSDP103", "bom.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert path.read_bytes() == b"\xef\xbb\xbf" + FIXED.encode()


def test_crlf_kept_including_inserted_lines(tmp_path):
    path = tmp_path / "crlf.py"
    path.write_bytes(NO_SYNC.replace("\n", "\r\n").encode())
    result = run("--fix", "--select", "FSDP105", "crlf.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    data = path.read_bytes()
    assert b"no_sync" not in data
    assert data.count(b"\n") > NO_SYNC.count("\n")  # the fix inserted lines
    assert data.count(b"\n") == data.count(b"\r\n"), data


def test_tabs_kept(tmp_path):
    text = BAD + "if out is not None:\n\tif True:\n\t\tout = model.forward(out)\n"
    path = tmp_path / "tabs.py"
    path.write_text(text)
    result = run("--fix", "--select", "FSDP103", "tabs.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    fixed = path.read_text()
    assert "model.forward(" not in fixed, fixed
    assert fixed == text.replace("model.forward(", "model(")


def test_empty_file(tmp_path):
    (tmp_path / "empty.py").write_bytes(b"")
    result = run("empty.py", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.strip() == "All checks passed!"


def test_very_deep_expression(tmp_path):
    (tmp_path / "deep.py").write_text("from torch.distributed.fsdp import fully_shard\n" + "x = " + "(" * 5000 + "1" + ")" * 5000 + "\n")
    (tmp_path / "bad.py").write_text(BAD)
    result = run(".", cwd=tmp_path)
    assert result.returncode == 1
    assert "deep.py:1:1: FSDP001" in result.stdout
    assert "bad.py:6:7: FSDP103" in result.stdout


def test_very_long_operator_chain(tmp_path):
    (tmp_path / "chain.py").write_text("from torch.distributed.fsdp import fully_shard\n" + "x = " + "1+" * 50000 + "1\n")
    result = run("chain.py", cwd=tmp_path)
    assert result.returncode == 1
    assert "FSDP001" in result.stdout


def test_directory_symlink_loop(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "bad.py").write_text(BAD)
    (tmp_path / "pkg" / "loop").symlink_to(tmp_path, target_is_directory=True)
    result = run(".", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.count("FSDP103") == 1


def test_broken_symlink(tmp_path):
    (tmp_path / "dangling.py").symlink_to(tmp_path / "nowhere.py")
    (tmp_path / "bad.py").write_text(BAD)
    result = run(".", cwd=tmp_path)
    assert result.returncode == 1
    assert "bad.py:6:7: FSDP103" in result.stdout
    dangling = [line for line in result.stdout.splitlines() if line.startswith("dangling.py")]
    assert all("FSDP002" in line for line in dangling)


def test_missing_path(tmp_path):
    result = run("missing.py", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fsdplint: error:") and "missing.py" in lines[0]


def test_fix_keeps_permission_bits(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(BAD)
    path.chmod(0o640)
    result = run("--fix", "--select", "FSDP103", "bad.py", cwd=tmp_path)
    assert result.returncode == 0
    assert path.read_text() == FIXED
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["bad.py"]  # no temp file left behind


def test_failing_write_keeps_original(tmp_path, monkeypatch):
    from fsdplint.cli import main

    path = tmp_path / "bad.py"
    path.write_text(BAD)

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "replace", refuse)
    result = CliRunner().invoke(main, ["check", "--fix", "bad.py"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "bad.py" in result.output and "Permission denied" in result.output
    assert path.read_text() == BAD
    assert [p.name for p in tmp_path.iterdir()] == ["bad.py"]


def test_fix_that_would_not_parse_is_dropped(tmp_path, monkeypatch):
    import fsdplint.fixes
    from fsdplint.cli import main

    path = tmp_path / "bad.py"
    path.write_text(BAD)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(fsdplint.fixes, "apply_fixes", lambda model, fixes: "def (:\n")
    result = CliRunner().invoke(main, ["check", "--fix", "--select", "FSDP103", "--output-format", "concise", "bad.py"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "FSDP005" in result.output
    assert path.read_text() == BAD
