"""The `fsdplint` command line, run as a subprocess (`python -m fsdplint`) for real exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BAD = """\
import torch
from torch.distributed.fsdp import fully_shard

model = torch.nn.Transformer(d_model=2, nhead=1)  # blocks in it: sharding the root only is FSDP101
fully_shard(model)
out = model.forward(torch.ones(2))
"""
FIXED = BAD.replace("model.forward(torch.ones(2))", "model(torch.ones(2))")
CLEAN = "def add(a, b):\n    return a + b\n"
# FSDP1 for the opt-in migration (FSDP501): one wrap it migrates, one it leaves for a person.
FSDP1 = """\
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

model = FSDP(torch.nn.Linear(2, 2), use_orig_params=True)
with model.no_sync():
    model(torch.ones(2)).sum().backward()
"""
FSDP1_MIGRATED = """\
import torch
from torch.distributed.fsdp import fully_shard

model = torch.nn.Linear(2, 2)
model = fully_shard(model)
model.set_requires_gradient_sync(False)
try:
    model(torch.ones(2)).sum().backward()
finally:
    model.set_requires_gradient_sync(True)
"""
FSDP1_BY_HAND = """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

def wrap(model, policy):
    return FSDP(model, auto_wrap_policy=policy)
"""
# FSDP104 (optimizer built before sharding) has only an unsafe fix.
UNSAFE = """\
import torch
from torch.distributed.fsdp import fully_shard

model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for layer in model:
    fully_shard(layer)
fully_shard(model)
"""


def run(*args: str, cwd: Path, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "fsdplint", *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    return result


def codes(result: subprocess.CompletedProcess) -> set[str]:
    return {line.split()[1] for line in result.stdout.splitlines() if ": FSDP" in line}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "bad.py").write_text(BAD)
    return tmp_path


def check(project: Path, *args: str) -> subprocess.CompletedProcess:
    return run("check", "--output-format", "concise", *args, cwd=project)


# exit codes


def test_exit_0_on_clean_file(tmp_path):
    (tmp_path / "clean.py").write_text(CLEAN)
    result = check(tmp_path, "clean.py")
    assert result.returncode == 0
    assert result.stdout.strip() == "All checks passed!"


def test_exit_1_on_findings(project):
    result = check(project, "bad.py")
    assert result.returncode == 1
    assert codes(result) == {"FSDP101", "FSDP103"}
    assert "bad.py:6:7: FSDP103" in result.stdout


def test_default_command_is_check(project):
    assert run("bad.py", cwd=project).returncode == 1


def test_exit_zero(project):
    result = check(project, "--exit-zero", "bad.py")
    assert result.returncode == 0
    assert "FSDP103" in result.stdout


def test_exit_2_on_bad_option(project):
    assert check(project, "--no-such-option", "bad.py").returncode == 2


# selection


@pytest.mark.parametrize("selector", ["FSDP103", "FSDP10", "forward-bypasses-hooks"])
def test_select(project, selector):
    result = check(project, "--select", selector, "bad.py")
    if selector == "FSDP10":
        assert codes(result) == {"FSDP101", "FSDP103"}
    else:
        assert codes(result) == {"FSDP103"}


def test_select_prefix(project):
    assert codes(check(project, "--select", "FSDP1", "bad.py")) == {"FSDP101", "FSDP103"}
    assert check(project, "--select", "FSDP2", "bad.py").returncode == 0


def test_opt_in_rule_runs_only_when_named(tmp_path):
    (tmp_path / "train.py").write_text(FSDP1)
    for selection in ([], ["--select", "ALL"], ["--select", "FSDP5"], ["--extend-select", "FSDP50"]):
        assert "FSDP501" not in check(tmp_path, *selection, "train.py").stdout, selection
    for selector in ("FSDP501", "migrate-fsdp1-to-fsdp2"):
        assert codes(check(tmp_path, "--select", selector, "train.py")) == {"FSDP501"}
    assert codes(check(tmp_path, "--select", "ALL", "--extend-select", "FSDP501", "train.py")) == {"FSDP501"}
    assert check(tmp_path, "--select", "FSDP501", "--ignore", "FSDP5", "train.py").returncode == 0


def test_migrate_shows_the_diff_and_writes_it_with_write(tmp_path):
    (tmp_path / "train.py").write_text(FSDP1)
    shown = run("migrate", "train.py", cwd=tmp_path)
    assert shown.returncode == 1
    assert "+model = fully_shard(model)" in shown.stdout and "Would migrate 1 file; 0 left for a person." in shown.stderr
    assert (tmp_path / "train.py").read_text() == FSDP1
    written = run("migrate", "--write", "train.py", cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "train.py").read_text() == FSDP1_MIGRATED
    assert run("check", "train.py", cwd=tmp_path).returncode == 0
    # The same as selecting the rule and applying unsafe fixes.
    (tmp_path / "again.py").write_text(FSDP1)
    assert run("check", "--select", "FSDP501", "--fix", "--unsafe-fixes", "again.py", cwd=tmp_path).returncode == 0
    assert (tmp_path / "again.py").read_text() == FSDP1_MIGRATED


def test_migrate_lists_what_is_left_for_a_person(tmp_path):
    (tmp_path / "wrap.py").write_text(FSDP1_BY_HAND)
    result = run("migrate", "--write", ".", cwd=tmp_path)
    assert result.returncode == 1
    assert "wrap.py:4:12: FSDP501" in result.stderr and "auto_wrap_policy=policy" in result.stderr
    assert "Migrated 0 files; 1 left for a person." in result.stderr
    assert (tmp_path / "wrap.py").read_text() == FSDP1_BY_HAND


@pytest.mark.parametrize("selector", ["FSDP103", "FSDP1", "forward-bypasses-hooks"])
def test_ignore(project, selector):
    result = check(project, "--ignore", selector, "bad.py")
    assert "FSDP103" not in codes(result)
    if selector == "FSDP1":
        assert result.returncode == 0


@pytest.mark.parametrize("selector", ["FSDP103", "forward-bypasses-hooks"])
def test_extend_select(project, selector):
    result = check(project, "--select", "FSDP101", "--extend-select", selector, "bad.py")
    assert codes(result) == {"FSDP101", "FSDP103"}


def test_comma_separated_select(project):
    assert codes(check(project, "--select", "FSDP101,FSDP103", "bad.py")) == {"FSDP101", "FSDP103"}


@pytest.mark.parametrize("option", ["--select", "--ignore", "--extend-select"])
def test_unknown_selector(project, option):
    result = check(project, option, "FSDP999", "bad.py")
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fsdplint: error:"), result.stderr
    assert "FSDP999" in lines[0]


# output formats


def test_concise(project):
    result = check(project, "bad.py")
    assert any(line.startswith("bad.py:6:7: FSDP103 ") for line in result.stdout.splitlines())
    assert "^" not in result.stdout


def test_full(project):
    result = run("check", "--output-format", "full", "bad.py", cwd=project)
    assert "bad.py:6:7: FSDP103" in result.stdout
    assert "out = model.forward(torch.ones(2))" in result.stdout
    assert "^" in result.stdout


def test_json(project):
    result = run("check", "--output-format", "json", "bad.py", cwd=project)
    assert result.returncode == 1
    data = json.loads(result.stdout)
    found = [item for item in data if item["code"] == "FSDP103"]
    assert len(found) == 1
    assert found[0]["location"] == {"row": 6, "column": 7}
    assert found[0]["filename"].endswith("bad.py")
    assert found[0]["fix"] is not None


def test_github(project):
    result = run("check", "--output-format", "github", "bad.py", cwd=project)
    assert any(line.startswith("::error") and "FSDP103" in line and "line=6" in line for line in result.stdout.splitlines())


def test_sarif(project):
    result = run("check", "--output-format", "sarif", "bad.py", cwd=project)
    data = json.loads(result.stdout)
    assert data["version"] == "2.1.0"
    results = data["runs"][0]["results"]
    assert any(item["ruleId"] == "FSDP103" for item in results)


def test_statistics(project):
    result = check(project, "--statistics", "bad.py")
    rows = [line.split() for line in result.stdout.splitlines()]
    assert ["1", "FSDP103", "[*]", "forward-bypasses-hooks"] in rows
    assert any(row[:2] == ["1", "FSDP101"] for row in rows)


def test_quiet(project):
    loud = check(project, "bad.py")
    quiet = check(project, "--quiet", "bad.py")
    assert "Found" in loud.stdout
    assert "Found" not in quiet.stdout
    assert "FSDP103" in quiet.stdout
    assert quiet.returncode == 1


# fixing


def test_diff_prints_and_writes_nothing(project):
    result = check(project, "--diff", "bad.py")
    assert result.returncode == 1
    assert "-out = model.forward(torch.ones(2))" in result.stdout
    assert "+out = model(torch.ones(2))" in result.stdout
    assert (project / "bad.py").read_text() == BAD


def test_diff_without_fixes_exits_0(tmp_path):
    (tmp_path / "clean.py").write_text(CLEAN)
    result = check(tmp_path, "--diff", "clean.py")
    assert result.returncode == 0
    assert result.stdout == ""


def test_fix_writes_and_is_idempotent(project):
    first = check(project, "--fix", "--select", "FSDP103", "bad.py")
    assert first.returncode == 0, first.stdout
    assert (project / "bad.py").read_text() == FIXED
    second = check(project, "--fix", "--select", "FSDP103", "bad.py")
    assert second.returncode == 0
    assert (project / "bad.py").read_text() == FIXED
    assert "fixed" not in second.stdout


def test_fix_leaves_unfixable_findings(project):
    result = check(project, "--fix", "bad.py")
    assert result.returncode == 1  # FSDP101 has no fix
    assert codes(result) == {"FSDP101"}
    assert (project / "bad.py").read_text() == FIXED


def test_unsafe_fix_needs_flag(tmp_path):
    (tmp_path / "unsafe.py").write_text(UNSAFE)
    safe_only = check(tmp_path, "--fix", "unsafe.py")
    assert safe_only.returncode == 1
    assert (tmp_path / "unsafe.py").read_text() == UNSAFE
    assert "--unsafe-fixes" in safe_only.stdout
    assert check(tmp_path, "--diff", "unsafe.py").stdout == ""
    assert "-opt = torch.optim.SGD" in check(tmp_path, "--diff", "--unsafe-fixes", "unsafe.py").stdout
    fixed = check(tmp_path, "--fix", "--unsafe-fixes", "unsafe.py")
    assert fixed.returncode == 0, fixed.stdout
    text = (tmp_path / "unsafe.py").read_text()
    assert text != UNSAFE
    assert text.index("fully_shard(model)") < text.index("opt = torch.optim.SGD")


def test_fix_keeps_lines_within_88_and_imports_in_sorted_order(tmp_path):
    save = """\
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

model = torch.nn.Linear(2, 2)
fully_shard(model)
optimizer = torch.optim.AdamW(model.parameters())
for path in ["checkpoint.pt"]:
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
"""
    (tmp_path / "save.py").write_text(save)
    assert check(tmp_path, "--fix", "--unsafe-fixes", "--select", "FSDP201", "save.py").returncode == 0
    assert (tmp_path / "save.py").read_text() == """\
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
)
from torch.distributed.fsdp import fully_shard

model = torch.nn.Linear(2, 2)
fully_shard(model)
optimizer = torch.optim.AdamW(model.parameters())
for path in ["checkpoint.pt"]:
    model_state_dict = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    optimizer_state_dict = get_optimizer_state_dict(
        model,
        optimizer,
        options=StateDictOptions(full_state_dict=True, cpu_offload=True),
    )
    if dist.get_rank() == 0:
        torch.save({"model": model_state_dict, "optimizer": optimizer_state_dict}, path)
"""


# stdin


def test_stdin(tmp_path):
    result = run("check", "--output-format", "concise", "-", "--stdin-filename", "train.py", cwd=tmp_path, stdin=BAD)
    assert result.returncode == 1
    assert "train.py:6:7: FSDP103" in result.stdout


def test_stdin_fix_prints_fixed_source(tmp_path):
    result = run("check", "--fix", "--select", "FSDP103", "-", "--stdin-filename", "train.py", cwd=tmp_path, stdin=BAD)
    assert result.returncode == 0
    assert result.stdout == FIXED
    assert not (tmp_path / "train.py").exists()


# rule


@pytest.mark.parametrize("name", ["FSDP103", "forward-bypasses-hooks"])
def test_rule(tmp_path, name):
    result = run("rule", name, cwd=tmp_path)
    assert result.returncode == 0
    assert "FSDP103" in result.stdout and "forward-bypasses-hooks" in result.stdout


def test_rule_all_prints_every_rule_documentation(tmp_path):
    from fsdplint.registry import all_rules
    from fsdplint.rule import render_doc

    rules = all_rules().rules
    result = run("rule", "--all", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout == "\n".join(render_doc(rule) for rule in rules)  # as ruff: each page, a blank line between
    documents = json.loads(run("rule", "--all", "--output-format", "json", cwd=tmp_path).stdout)
    assert [(d["code"], d["documentation"]) for d in documents] == [(rule.code, rule.documentation()) for rule in rules]
    both = run("rule", "FSDP103", "--all", cwd=tmp_path)
    assert both.returncode == 2 and both.stderr.startswith("fsdplint: error:")


def test_rule_table_columns_align(tmp_path):
    result = run("rule", cwd=tmp_path)
    assert result.returncode == 0
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["code", "name", "severity", "fix", "summary"]
    starts = [header.index(title) for title in ("name", "severity", "fix", "summary")]
    assert len(rows) == len({row.split()[0] for row in rows}) > 20
    for row in rows:
        for start in starts:  # each cell begins where its title does, after a gap
            assert row[start - 2:start] == "  " and row[start] != " ", row


def test_rule_unknown(tmp_path):
    result = run("rule", "FSDP999", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("fsdplint: error:")


@pytest.mark.parametrize("args", [["--version"], ["-V"], ["version"]])
def test_version(tmp_path, args):
    from fsdplint import __version__

    result = run(*args, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, f"fsdplint {__version__}\n")


def test_version_as_json(tmp_path):
    from fsdplint import __version__

    assert json.loads(run("version", "--output-format", "json", cwd=tmp_path).stdout) == {"version": __version__}


@pytest.mark.parametrize("typed, meant", [("chek", "check"), ("verfy", "verify"), ("rules", "rule"), ("migrat", "migrate")])
def test_mistyped_command_names_the_command(tmp_path, typed, meant):
    result = run(typed, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"fsdplint: error: `{typed}` is neither a command nor an existing path; did you mean `fsdplint {meant}`?"]


def test_a_path_close_to_a_command_is_still_a_path(tmp_path):
    # A missing file is reported as missing, not as a mistyped command; an existing one is checked.
    assert "chek.py: no such file or directory" in run("chek.py", cwd=tmp_path).stderr
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "bad.py").write_text(BAD)
    assert run("rules", cwd=tmp_path).returncode == 1


# configuration


def _pyproject(folder: Path, body: str) -> None:
    (folder / "pyproject.toml").write_text("[tool.fsdplint]\n" + body)


def test_config_select(project):
    _pyproject(project, 'select = ["FSDP103"]\n')
    assert codes(check(project, ".")) == {"FSDP103"}


def test_config_ignore(project):
    _pyproject(project, 'ignore = ["forward-bypasses-hooks"]\n')
    assert codes(check(project, ".")) == {"FSDP101"}


def test_config_found_from_checked_dir(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "bad.py").write_text(BAD)
    _pyproject(src, 'select = ["FSDP103"]\n')
    assert codes(check(tmp_path, "src")) == {"FSDP103"}


def test_config_exclude(project):
    (project / "gen").mkdir()
    (project / "gen" / "other.py").write_text(BAD)
    _pyproject(project, 'exclude = ["gen/"]\n')
    result = check(project, ".")
    assert "other.py" not in result.stdout
    assert "bad.py" in result.stdout


def test_config_per_file_ignores(project):
    (project / "other.py").write_text(BAD)
    _pyproject(project, '[tool.fsdplint.per-file-ignores]\n"other.py" = ["FSDP103"]\n')
    result = check(project, ".")
    assert "bad.py:6:7: FSDP103" in result.stdout
    assert "other.py:6:7: FSDP103" not in result.stdout
    assert "other.py:5:1: FSDP101" in result.stdout


def test_config_unknown_key(project):
    _pyproject(project, 'selekt = ["FSDP103"]\n')
    result = check(project, ".")
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fsdplint: error:") and "selekt" in lines[0]


def test_config_invalid_toml(project):
    _pyproject(project, "select = [\n")
    result = check(project, ".")
    assert result.returncode == 2
    assert result.stderr.startswith("fsdplint: error:")


# noqa


def test_noqa_code(project):
    (project / "bad.py").write_text(BAD.replace("torch.ones(2))", "torch.ones(2))  # noqa: FSDP103"))
    assert codes(check(project, "bad.py")) == {"FSDP101"}


def test_noqa_bare(project):
    (project / "bad.py").write_text(BAD.replace("torch.ones(2))", "torch.ones(2))  # noqa"))
    assert codes(check(project, "bad.py")) == {"FSDP101"}


def test_noqa_other_code_does_not_suppress(project):
    (project / "bad.py").write_text(BAD.replace("torch.ones(2))", "torch.ones(2))  # noqa: FSDP101"))
    assert codes(check(project, "bad.py")) == {"FSDP101", "FSDP103", "FSDP003"}


def test_file_level_noqa(project):
    (project / "bad.py").write_text("# fsdplint: noqa: FSDP103\n" + BAD)
    assert codes(check(project, "bad.py")) == {"FSDP101"}


def test_unknown_noqa_code(project):
    (project / "bad.py").write_text(BAD.replace("torch.ones(2))", "torch.ones(2))  # noqa: FSDP999"))
    result = check(project, "bad.py")
    assert "FSDP004" in codes(result)
    assert "FSDP103" in codes(result)


def test_noqa_in_string_is_not_a_directive(project):
    (project / "bad.py").write_text(BAD + 's = "# noqa: FSDP103"\n')
    assert codes(check(project, "bad.py")) == {"FSDP101", "FSDP103"}


# discovery


def test_gitignored_file_skipped(project):
    (project / ".gitignore").write_text("ignored.py\n")
    (project / "ignored.py").write_text(BAD)
    result = check(project, ".")
    assert "bad.py" in result.stdout
    assert "ignored.py" not in result.stdout
    # Named explicitly, it is checked.
    assert "ignored.py" in check(project, "ignored.py").stdout


def test_gitignore_patterns_of_folders_other_extensions_and_negations(tmp_path):
    # Python files are matched against the patterns that may match one (folders are pruned by the
    # walk, `*.pyc` cannot match): the same files as git's rules over every pattern.
    from fsdplint.discovery import discover

    (tmp_path / ".gitignore").write_text("build*/\n*.pyc\ngen_*.py\n!gen_keep.py\nscratch\n*.py[cod]\nnotes.txt\n")
    for name in ("kept.py", "gen_a.py", "gen_keep.py", "scratch", "build_x/inside.py", "pkg/scratch/deep.py", "pkg/ok.pyi", "a.pyc"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    found = sorted(candidate.path.relative_to(tmp_path).as_posix() for candidate in discover([tmp_path], [], tmp_path, False))
    assert found == ["gen_keep.py", "kept.py", "pkg/ok.pyi"]


def test_default_excludes(project):
    (project / ".venv").mkdir()
    (project / ".venv" / "lib.py").write_text(BAD)
    assert ".venv" not in check(project, ".").stdout


def test_force_exclude(project):
    (project / "skip.py").write_text(BAD)
    _pyproject(project, 'exclude = ["skip.py"]\n')
    assert "skip.py" not in check(project, ".").stdout
    assert "skip.py" in check(project, "skip.py").stdout
    forced = check(project, "--force-exclude", "skip.py")
    assert forced.returncode == 0
    assert "skip.py" not in forced.stdout


def test_non_python_files_ignored_in_walk(project):
    (project / "notes.txt").write_text("model.forward(x)\n")
    assert "notes.txt" not in check(project, ".").stdout


def test_exclude_and_extend_exclude_on_the_command_line(project):
    for folder in ("gen", "vendor"):
        (project / folder).mkdir()
        (project / folder / "other.py").write_text(BAD)
    _pyproject(project, 'exclude = ["gen/"]\n')

    def checked(*args: str) -> set[str]:
        return {line.split(":")[0] for line in check(project, *args, ".").stdout.splitlines() if ": FSDP" in line}

    assert checked() == {"bad.py", "vendor/other.py"}
    # --exclude replaces the configured `exclude`; --extend-exclude adds to it; both take commas.
    assert checked("--exclude", "vendor/") == {"bad.py", "gen/other.py"}
    assert checked("--extend-exclude", "vendor/") == {"bad.py"}
    assert checked("--exclude", "vendor/,bad.py") == {"gen/other.py"}


# what a run would do


def test_show_files_lists_the_files_to_check(project):
    (project / "sub").mkdir()
    (project / "sub" / "more.py").write_text(CLEAN)
    (project / "sub" / "notes.txt").write_text("not python\n")
    (project / "skipped.py").write_text(CLEAN)
    result = run("check", "--show-files", "--extend-exclude", "skipped.py", ".", cwd=project)
    assert result.returncode == 0, result.stderr
    # As ruff: absolute paths, sorted, one a line, and nothing is checked.
    assert result.stdout.splitlines() == sorted(str(path.resolve()) for path in (project / "bad.py", project / "sub" / "more.py"))
    (project / "empty").mkdir()
    empty = run("check", "--show-files", "empty", cwd=project)
    assert (empty.returncode, empty.stdout) == (0, "")
    assert "no Python files found" in empty.stderr


def test_show_settings(project):
    _pyproject(project, 'ignore = ["FSDP101"]\nper-file-ignores = { "tests/*" = ["FSDP201"] }\n')
    result = run("check", "--show-settings", "--select", "FSDP1", "--extend-exclude", "gen/", ".", cwd=project)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == [f'Resolved settings for: "{(project / "bad.py").resolve()}"', f'Settings path: "{(project / "pyproject.toml").resolve()}"']
    for line in ('select = ["FSDP1"]', 'ignore = ["FSDP101"]', 'extend-exclude = ["gen/"]', 'per-file-ignores = { "tests/*" = ["FSDP201"] }',
                 '    "FSDP103",  # forward-bypasses-hooks'):
        assert line in lines, result.stdout
    assert not any('"FSDP101"' in line for line in lines[lines.index("rules = ["):])  # ignored, so not run
    assert not any('"FSDP2' in line for line in lines[lines.index("rules = ["):])  # not selected
    empty = run("check", "--show-settings", "--exclude", "bad.py", ".", cwd=project)
    assert empty.returncode == 2 and empty.stderr.startswith("fsdplint: error: no Python files found")


def test_output_file(project):
    result = run("check", "--output-format", "json", "--output-file", "reports/fsdplint.json", "bad.py", cwd=project)
    assert (result.returncode, result.stdout) == (1, "")
    assert {item["code"] for item in json.loads((project / "reports" / "fsdplint.json").read_text())} == {"FSDP101", "FSDP103"}
    # The human formats go there with their summary, never colored (the file is read later, elsewhere).
    result = run("check", "--output-file", "report.txt", "bad.py", cwd=project, env={"FORCE_COLOR": "1"})
    report = (project / "report.txt").read_text()
    assert result.stdout == "" and "bad.py:6:7: FSDP103" in report and report.endswith("fixable with the `--fix` option.\n")
    assert "\x1b[" not in report
    refused = run("check", "--output-file", "bad.py/report.txt", "bad.py", cwd=project)
    assert refused.returncode == 2
    [line] = refused.stderr.splitlines()
    assert line.startswith("fsdplint: error: bad.py/report.txt: cannot write the report: ")


# --add-noqa


LATIN1_CRLF = ("# -*- coding: latin-1 -*-\n# café\n" + BAD.replace("torch.ones(2))", "torch.ones(2))  # noqa: E501")).replace("\n", "\r\n").encode("latin-1")


def test_add_noqa_suppresses_every_finding(project):
    (project / "legacy.py").write_bytes(LATIN1_CRLF)
    result = run("check", "--add-noqa", ".", cwd=project)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "Added 4 noqa directives.\n")
    assert (project / "bad.py").read_text() == BAD.replace("fully_shard(model)\n", "fully_shard(model)  # noqa: FSDP101\n").replace(
        "torch.ones(2))\n", "torch.ones(2))  # noqa: FSDP103\n")
    # Written as --fix writes: its encoding and line endings kept; an existing `# noqa` takes the code.
    expected = LATIN1_CRLF.replace(b"fully_shard(model)\r\n", b"fully_shard(model)  # noqa: FSDP101\r\n").replace(b"E501", b"E501, FSDP103")
    assert (project / "legacy.py").read_bytes() == expected
    after = check(project, ".")
    assert (after.returncode, codes(after)) == (0, set())
    again = run("check", "--add-noqa", ".", cwd=project)
    assert (again.returncode, again.stderr) == (0, "")


@pytest.mark.parametrize("args", [["--fix"], ["--fix-only"], ["--diff"], ["-", "--stdin-filename", "train.py"]])
def test_add_noqa_refuses_what_it_cannot_do(project, args):
    result = run("check", "--add-noqa", *args, *(["bad.py"] if "-" not in args else []), cwd=project, stdin=BAD)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("fsdplint: error: --add-noqa")
    assert (project / "bad.py").read_text() == BAD


# --fix-only and --exit-non-zero-on-fix


def test_fix_only_fixes_and_reports_only_that(project):
    (project / "legacy.py").write_bytes(LATIN1_CRLF.replace(b"  # noqa: E501", b""))
    result = check(project, "--fix-only", ".")
    # As ruff: the findings left (FSDP101 has no fix) are not reported, and do not fail the run.
    assert (result.returncode, result.stdout) == (0, "Fixed 2 errors.\n")
    assert (project / "bad.py").read_text() == FIXED
    assert (project / "legacy.py").read_bytes() == LATIN1_CRLF.replace(b"  # noqa: E501", b"").replace(b"model.forward(", b"model(")
    nothing = check(project, "--fix-only", ".")
    assert (nothing.returncode, nothing.stdout) == (0, "")


@pytest.mark.parametrize("args, status", [
    (["--fix-only"], 0),
    (["--fix-only", "--exit-non-zero-on-fix"], 1),
    (["--fix", "--select", "FSDP103"], 0),  # nothing left
    (["--fix", "--select", "FSDP103", "--exit-non-zero-on-fix"], 1),  # but a file changed
    (["--fix", "--select", "FSDP103", "--exit-non-zero-on-fix", "--exit-zero"], 0),
])
def test_exit_non_zero_on_fix(project, args, status):
    assert check(project, *args, "bad.py").returncode == status
    assert (project / "bad.py").read_text() == FIXED
    assert check(project, *args, "bad.py").returncode == 0  # nothing more to fix, nothing left


# configuration errors


@pytest.mark.parametrize("body, complaint", [
    ('select = "FSDP1"\n', '[tool.fsdplint] select must be a list of strings: write ["FSDP1"], not "FSDP1"'),
    ('per-file-ignores = { "tests/*" = "FSDP201" }\n', '[tool.fsdplint] per-file-ignores."tests/*" must be a list of strings'),
    ('per-file-ignores = { "tests/*" = ["FSDP999"] }\n', '[tool.fsdplint] per-file-ignores."tests/*": unknown rule selector `FSDP999`'),
    ('select = ["FSDP999"]\n', "[tool.fsdplint] select: unknown rule selector `FSDP999`"),
])
def test_config_error_names_the_file_and_key(project, body, complaint):
    _pyproject(project, body)
    for args in ([], ["--select", "FSDP103"]):  # a flag that overrides the key does not hide the error
        result = check(project, *args, ".")
        assert result.returncode == 2
        [line] = result.stderr.splitlines()
        assert line.startswith(f"fsdplint: error: {(project / 'pyproject.toml').resolve()}: {complaint}"), line
