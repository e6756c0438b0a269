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
    assert "latin.py:1:6: FSDP002 not valid utf-8: cannot decode 0xe9" in result.stdout


def test_full_output_shows_the_line_a_file_stops_being_read_or_parsed_at(tmp_path):
    (tmp_path / "latin.py").write_bytes(b'x = 1\r\ny = "caf\xe9"\r\n')
    (tmp_path / "cp1252.py").write_bytes(b'# coding: cp1252\nx = 1\ny = "\x81"\n')
    (tmp_path / "syntax.py").write_text("from torch.distributed.fsdp import fully_shard\n\ndef broken(:\n    fully_shard(model)\n")
    result = subprocess.run([sys.executable, "-m", "fsdplint", "check", "--no-cache", "."], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    blocks = {block.split(":")[0]: block.splitlines() for block in result.stdout.split("\n\n")}
    assert blocks["latin.py"] == [
        "latin.py:2:9: FSDP002 [error] not valid utf-8: cannot decode 0xe9: invalid continuation byte",
        "  |",
        '2 | y = "caf\ufffd"',
        "  |         ^ unreadable-file",
    ]
    assert blocks["cp1252.py"][0].startswith("cp1252.py:3:6: FSDP002 [error] not valid cp1252: cannot decode 0x81")
    assert blocks["cp1252.py"][2:] == ['3 | y = "\ufffd"', "  |      ^ unreadable-file"]
    assert blocks["syntax.py"] == [
        "syntax.py:3:12: FSDP001 [error] SyntaxError: invalid syntax",
        "  |",
        "3 | def broken(:",
        "  |            ^ invalid-syntax",
    ]


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


def test_missing_path_among_others(tmp_path):
    (tmp_path / "bad.py").write_text(BAD)
    result = run("missing.py", "bad.py", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["fsdplint: error: missing.py: no such file or directory"]
    assert "bad.py:6:7: FSDP103" in result.stdout


def test_mixed_line_endings_kept(tmp_path):
    lines = FIXED.splitlines(True)
    mixed = "".join(line.replace("\n", "\r\n") if number % 2 else line for number, line in enumerate(BAD.splitlines(True)))
    path = tmp_path / "mixed.py"
    path.write_bytes(mixed.encode())
    result = run("--fix", "--select", "FSDP103", "mixed.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    assert path.read_bytes() == "".join(line.replace("\n", "\r\n") if number % 2 else line for number, line in enumerate(lines)).encode()


def test_50_mb_files(tmp_path):
    """A huge file with an FSDP token is reported as too large to analyze (parsing it would take hours);
    one without is skipped by the text prefilter; neither is changed; the other files are checked."""
    filler = "x = 1  # padding\n" * (50_000_000 // 17)
    (tmp_path / "huge_fsdp.py").write_text("from torch.distributed.fsdp import fully_shard\n" + filler)
    (tmp_path / "huge_plain.py").write_text(filler)
    (tmp_path / "bad.py").write_text(BAD)
    sizes = {name: (tmp_path / name).stat().st_size for name in ("huge_fsdp.py", "huge_plain.py")}
    result = run("--fix", ".", cwd=tmp_path)
    assert result.returncode == 1
    assert "huge_fsdp.py:1:1: FSDP002 too large to analyze" in result.stdout
    assert "huge_plain.py" not in result.stdout
    assert (tmp_path / "bad.py").read_text() == FIXED
    assert {name: (tmp_path / name).stat().st_size for name in sizes} == sizes
    assert (tmp_path / "huge_plain.py").read_text() == filler


@pytest.mark.parametrize("body, complaint", [
    ("select = 3\n", "select must be a list of strings"),
    ('exclude = ["gen/", 1]\n', "exclude must be a list of strings"),
    ('per-file-ignores = "tests/*"\n', "per-file-ignores must be a table"),
    ('select = ["FSDP999"]\n', "unknown rule selector `FSDP999`"),
    ('ignore = ["no-such-rule"]\n', "unknown rule selector `no-such-rule`"),
])
def test_config_bad_value(tmp_path, body, complaint):
    (tmp_path / "pyproject.toml").write_text("[tool.fsdplint]\n" + body)
    (tmp_path / "bad.py").write_text(BAD)
    result = run("--fix", ".", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fsdplint: error:") and complaint in lines[0], lines
    assert (tmp_path / "bad.py").read_text() == BAD


def test_fix_keeps_permission_bits(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(BAD)
    path.chmod(0o640)
    result = run("--fix", "--select", "FSDP103", "bad.py", cwd=tmp_path)
    assert result.returncode == 0
    assert path.read_text() == FIXED
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["bad.py"]  # no temp file left behind


def _fail_write(step: str, monkeypatch) -> None:
    """Make one step of the atomic write fail, as a full disk or a crash there would."""
    import fsdplint.source

    def refuse(*args, **kwargs):
        raise OSError(28, "No space left on device")

    if step == "write":
        real_fdopen = os.fdopen

        class HalfWritten:
            def __init__(self, handle):
                self.handle = handle

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.handle.close()

            def write(self, data):
                self.handle.write(data[: len(data) // 2])
                refuse()

        monkeypatch.setattr(fsdplint.source.os, "fdopen", lambda fd, mode: HalfWritten(real_fdopen(fd, mode)))
    else:
        monkeypatch.setattr(fsdplint.source.os, step, refuse)


@pytest.mark.parametrize("step", ["write", "fsync", "chmod", "replace"])
def test_failing_write_keeps_original(tmp_path, monkeypatch, step):
    from fsdplint.cli import main

    (tmp_path / "bad.py").write_text(BAD)
    monkeypatch.chdir(tmp_path)
    _fail_write(step, monkeypatch)
    result = CliRunner().invoke(main, ["check", "--fix", "--output-format", "concise", "bad.py"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "bad.py: cannot write the fix: No space left on device" in result.output
    assert "bad.py:6:7: FSDP103" in result.output  # not fixed, so still reported
    assert (tmp_path / "bad.py").read_text() == BAD
    assert [p.name for p in tmp_path.iterdir()] == ["bad.py"]  # no temp file left behind


def test_killed_while_writing_keeps_original(tmp_path):
    """A real SIGKILL at the rename: the original is intact (the temp file is all that is left)."""
    (tmp_path / "bad.py").write_text(BAD)
    kill_at_rename = (
        "import os, signal, sys; import fsdplint.source as s; "
        "s.os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL); "
        "from fsdplint.cli import main; sys.argv = ['fsdplint', 'check', '--fix', 'bad.py']; main()"
    )
    result = subprocess.run([sys.executable, "-c", kill_at_rename], cwd=tmp_path, capture_output=True, timeout=120)
    assert result.returncode == -9
    assert (tmp_path / "bad.py").read_text() == BAD
    left = [p.name for p in tmp_path.iterdir() if p.name != "bad.py"]
    assert all(name.startswith(".bad.py.") and name.endswith(".fsdplint.tmp") for name in left), left


def test_concurrent_fix_runs_never_tear_a_file(tmp_path):
    """Two `fsdplint --fix` on one tree at once: every file ends fixed (or, at worst, original)."""
    fixed_no_sync = NO_SYNC.replace("with model.no_sync():\n    loss = model(x)\n",
                                    "model.set_requires_gradient_sync(False)\ntry:\n    loss = model(x)\nfinally:\n    model.set_requires_gradient_sync(True)\n")
    originals = {f"f{i:02}.py": BAD if i % 2 else NO_SYNC for i in range(40)}
    for name, text in originals.items():
        (tmp_path / name).write_text(text)
    command = [sys.executable, "-m", "fsdplint", "check", "--fix", "--output-format", "concise", "."]
    runs = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=300) for run in runs]
    for run, (out, err) in zip(runs, outputs):
        assert run.returncode in (0, 1), out + err
        assert "Traceback" not in out + err
    for name, text in originals.items():
        fixed = FIXED if text is BAD else fixed_no_sync
        assert (tmp_path / name).read_text() in (fixed, text), name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(originals)


def test_read_only_file_is_not_fixed_and_others_are(tmp_path):
    (tmp_path / "a_read_only.py").write_text(BAD)
    (tmp_path / "a_read_only.py").chmod(0o444)
    (tmp_path / "b_writable.py").write_text(BAD)
    result = run("--fix", "--select", "FSDP103", ".", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["fsdplint: error: a_read_only.py: cannot write the fix: the file is read-only"]
    assert "a_read_only.py:6:7: FSDP103" in result.stdout  # still reported, since it was not fixed
    assert "b_writable.py" not in result.stdout
    assert "(1 fixed" in result.stdout, result.stdout
    assert (tmp_path / "a_read_only.py").read_text() == BAD
    assert stat.S_IMODE((tmp_path / "a_read_only.py").stat().st_mode) == 0o444
    assert (tmp_path / "b_writable.py").read_text() == FIXED


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file; test_unreadable_file proves the same path by failing the read")
def test_file_without_read_permission(tmp_path):
    (tmp_path / "secret.py").write_text(BAD)
    (tmp_path / "secret.py").chmod(0)
    (tmp_path / "bad.py").write_text(BAD)
    result = run(".", cwd=tmp_path)
    assert result.returncode == 1
    assert "secret.py:1:1: FSDP002 cannot read: Permission denied" in result.stdout
    assert "bad.py:6:7: FSDP103" in result.stdout


def test_unreadable_file(tmp_path, monkeypatch):
    """The read fails as it does for a file without read permission (tests run as root, who can read it)."""
    from fsdplint.cli import main

    (tmp_path / "secret.py").write_text(BAD)
    (tmp_path / "bad.py").write_text(BAD)
    real_read = Path.read_bytes

    def read_bytes(path):
        if path.name == "secret.py":
            raise PermissionError(13, "Permission denied", str(path))
        return real_read(path)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    result = CliRunner().invoke(main, ["check", "--fix", "--output-format", "concise", "."])
    assert result.exit_code == 1, result.output
    assert "secret.py:1:1: FSDP002 cannot read: Permission denied" in result.output
    assert (tmp_path / "secret.py").read_text() == BAD
    assert (tmp_path / "bad.py").read_text() == FIXED


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


def test_fix_over_a_hostile_tree_changes_only_what_it_fixes(tmp_path):
    """Every kind of bad file at once under --fix: each is reported, none is touched, and the one
    fixable file is fixed."""
    hostile = {
        "syntax.py": b"from torch.distributed.fsdp import fully_shard\ndef f(:\n",
        "nul.py": b"from torch.distributed.fsdp import fully_shard\x00\n",
        "latin.py": b'from torch.distributed.fsdp import fully_shard\nx = "\xe9"\n',
        "deep.py": b"from torch.distributed.fsdp import fully_shard\nx = " + b"(" * 5000 + b"1" + b")" * 5000 + b"\n",
        "continuation.py": b"from torch.distributed.fsdp import fully_shard\n\\\r\n",  # valid for CPython, not libcst
        "noqa.py": BAD.replace("torch.ones(2))", "torch.ones(2))  # noqa: FSDP999, FSDP103").encode(),
        "empty.py": b"",
    }
    for name, data in hostile.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "dangling.py").symlink_to(tmp_path / "nowhere.py")
    (tmp_path / "loop").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "bad.py").write_text(BAD)
    result = run("--fix", "--select", "FSDP0,FSDP103", ".", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    reported = {line.split(":")[0] + " " + line.split()[1] for line in result.stdout.splitlines() if line.count(":") >= 3}
    assert reported == {
        "syntax.py FSDP001", "nul.py FSDP002", "latin.py FSDP002", "deep.py FSDP001", "continuation.py FSDP002",
        "noqa.py FSDP004", "dangling.py FSDP002",
    }, result.stdout
    for name, data in hostile.items():
        assert (tmp_path / name).read_bytes() == data, name
    assert (tmp_path / "bad.py").read_text() == FIXED


def test_a_reader_that_closes_the_pipe_early_ends_the_run_quietly(tmp_path):
    """`fsdplint . | head -1`: no traceback and no internal error on stderr, and the exit a shell gives a
    writer whose reader went away."""
    for number in range(300):
        (tmp_path / f"train{number}.py").write_text("import torch\nfrom torch.distributed.fsdp import fully_shard\n"
                                                    "model = torch.nn.Sequential(torch.nn.Linear(2, 2))\nfully_shard(model)\nmodel.forward(1)\n")
    process = subprocess.Popen([sys.executable, "-m", "fsdplint", "check", "--no-cache", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.readline()
    process.stdout.close()  # as `head -1` does, long before the report ends
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert stderr == ""
