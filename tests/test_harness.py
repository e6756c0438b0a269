"""`fsdplint verify`: it passes a real fix, and fails a rule when the fix does not fix, when the fix
changes nothing, or when the bad script shows no symptom. The torchrun runs need the verify extra."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

import fsdplint.api
from fsdplint import harness
from fsdplint.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
SELF_TESTS = Path(__file__).parent / "harness_fixtures"

try:
    import torch  # noqa: F401

    HAS_TORCH = True
except ImportError:
    HAS_TORCH = False
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="the verify extra (torch) is not installed")


@pytest.fixture
def self_tests(tmp_path: Path) -> Path:
    """The harness's self-test cases beside the real fixtures' support module."""
    shutil.copy(FIXTURES / "fixture_support.py", tmp_path)
    for case in SELF_TESTS.iterdir():
        if case.is_dir():
            shutil.copytree(case, tmp_path / case.name)
    return tmp_path


@pytest.fixture
def rows_on_the_terminal(request, monkeypatch):
    """Print each row of `fsdplint verify` on pytest's terminal as it finishes, even with -q and
    captured output: the run of every rule takes minutes, and would otherwise show nothing until it ends."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        return
    verify_all = harness.verify_all

    def say(text: str) -> None:
        # Resuming pytest's capture sets sys.stdout and sys.stderr back to its own: CliRunner's are restored.
        streams = sys.stdout, sys.stderr
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"[{request.node.name}] {text}")
        sys.stdout, sys.stderr = streams

    def verify_all_showing_rows(cases, plan, fixtures, timeout, torchrun_args=(), progress=lambda row: None):
        def show(row):
            progress(row)
            say(harness.format_row(row))

        say(f"verifying {len(cases)} case(s) under torchrun; a row as each finishes:")
        return verify_all(cases, plan, fixtures, timeout, torchrun_args, show)

    monkeypatch.setattr(harness, "verify_all", verify_all_showing_rows)


def verify(fixtures: Path, *rules: str, report: Path | None = None):
    args = ["verify", "--device", "cpu", "--fixtures", str(fixtures), *(f"--rule={rule}" for rule in rules)]
    return CliRunner().invoke(main, args + (["--report", str(report)] if report else []))


@needs_torch
def test_a_fix_that_fixes_passes(self_tests: Path, tmp_path: Path, rows_on_the_terminal):
    result = verify(self_tests, "FSDP104", report=tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "PASS  FSDP104" in result.output and "wrong params_updated" in result.output and "1/1 passed" in result.output
    assert "| FSDP104 | cpu × 2 |" in (tmp_path / "out.md").read_text()
    assert '"passed": true' in (tmp_path / "out.json").read_text()


@needs_torch
def test_a_fix_that_does_not_fix_fails_the_rule(self_tests: Path, monkeypatch):
    # A broken fix: it changes the text but leaves the optimizer holding the unsharded parameters.
    monkeypatch.setattr(fsdplint.api, "fix_source", lambda text, *args, **kwargs: text + "# 'fixed'\n")
    result = verify(self_tests, "FSDP104")
    assert result.exit_code == 1
    assert "FAIL  FSDP104" in result.output and "NO: failed" in result.output and "0/8 updated (fsdplint fix)" in result.output


@needs_torch
def test_a_fix_that_changes_nothing_fails_the_rule(self_tests: Path, monkeypatch):
    monkeypatch.setattr(fsdplint.api, "fix_source", lambda text, *args, **kwargs: text)
    result = verify(self_tests, "FSDP104")
    assert result.exit_code == 1
    assert "FAIL  FSDP104" in result.output and "fix produced no change" in result.output


@needs_torch
def test_a_bad_script_that_trains_fails_the_rule(self_tests: Path):
    result = verify(self_tests, "TRAINS")
    assert result.exit_code == 1
    assert "FAIL  TRAINS" in result.output and "but the script trained" in result.output


@needs_torch
def test_a_migration_that_trains_differently_fails(self_tests: Path, monkeypatch):
    # A broken migration: it runs, but with another learning rate, so the losses part after step 1.
    monkeypatch.setattr(fsdplint.api, "fix_source", lambda text, *args, **kwargs: text.replace("lr=1e-2", "lr=2e-2"))
    result = verify(self_tests, "FSDP501")
    assert result.exit_code == 1
    assert "FAIL  FSDP501" in result.output and "none, trains" in result.output
    assert "NO: losses differ from the original" in result.output


@needs_torch
def test_a_hang_is_killed_with_every_rank(tmp_path: Path):
    # A copy at a path of its own, so that every process still running it can be found in /proc,
    # whether or not it had printed its PID before the kill.
    script = tmp_path / "hangs.py"
    script.write_text((SELF_TESTS / "hangs.py").read_text())
    run = harness.run_script(script, tmp_path, "cpu", 2, timeout=30)
    assert run.killed
    assert harness.judge_bad({"symptom": "hang"}, run)[0]
    assert any(line.startswith("PID ") for line in run.output.splitlines()), run.output
    left = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            running = str(script) in cmdline.read_bytes().decode(errors="replace")
            zombie = "\nState:\tZ" in (cmdline.parent / "status").read_text()
        except OSError:  # gone while we looked
            continue
        if running and not zombie:
            left.append(cmdline.parent.name)
    assert not left, f"processes left running: {left}"


@needs_torch
def test_what_a_run_writes_to_the_temp_folder_is_removed(tmp_path: Path):
    # The checkpoint fixtures save to tempfile.gettempdir(); each run must get a folder of its own.
    script = tmp_path / "writes_temp.py"
    script.write_text("import os, tempfile\n"
                      "path = os.path.join(tempfile.gettempdir(), f\"checkpoint_{os.environ['RANK']}.pt\")\n"
                      "open(path, 'w').close()\n"
                      "os.write(1, f'WROTE {path}\\n'.encode())\n")  # one write: the ranks share the pipe
    run = harness.run_script(script, tmp_path, "cpu", 2, timeout=60)
    assert run.returncode == 0, run.output
    written = [Path(line.split(" ", 1)[1]) for line in run.output.splitlines() if line.startswith("WROTE ")]
    assert len(written) == 2
    assert all(path.parent != Path(tempfile.gettempdir()) and not path.parent.exists() for path in written)


@needs_torch
def test_every_rule_verifies_on_cpu(rows_on_the_terminal):
    result = CliRunner().invoke(main, ["verify", "--device", "cpu", "--fixtures", str(FIXTURES)])
    assert result.exit_code == 0, result.output


def test_symptoms_are_judged_from_verify_toml():
    error = harness.Run(1, "RuntimeError: got mixed torch.Tensor and DTensor\n", 1.0)
    assert harness.judge_bad({"symptom": "error", "match": "got mixed"}, error) == (True, "error: got mixed")
    assert not harness.judge_bad({"symptom": "error", "match": "no_sync"}, error)[0]
    assert not harness.judge_bad({"symptom": "error", "match": "got mixed"}, harness.Run(0, "got mixed", 1.0))[0]
    timed_out = harness.Run(1, "[rank0]: RuntimeError: [../gloo/transport/tcp/pair.cc:534] Timed out waiting 15000ms\n", 16.0)
    assert harness.judge_bad({"symptom": "hang"}, timed_out)[0]
    assert harness.judge_bad({"symptom": "hang", "match": "Timed out"}, harness.Run(None, "", 180.0))[0]
    assert not harness.judge_bad({"symptom": "hang"}, error)[0]


def test_training_checks_read_every_boolean():
    trained = {"losses": [1.0, 0.5], "params_updated": 8, "params_total": 8, "finite": True, "ranks_agree": True}
    assert harness.failed_checks(trained) == []
    assert harness.failed_checks({**trained, "checkpoint_loads": False}) == ["checkpoint_loads"]
    assert harness.failed_checks({**trained, "losses": [1.0, 1.5], "params_updated": 0}) == ["loss_decreases", "params_updated"]
    wrong = harness.Run(0, "", 1.0, {**trained, "params_updated": 0})
    assert harness.judge_bad({"symptom": "wrong-state", "check": "params_updated"}, wrong) == (True, "wrong params_updated: loss 1→0.5, 0/8 updated")
    assert harness.judge_fixed(wrong) == (False, "failed params_updated: loss 1→0.5, 0/8 updated")


def test_a_run_that_fails_once_is_run_again_and_the_row_says_so(tmp_path: Path, monkeypatch):
    trained = {"losses": [1.0, 0.5], "params_updated": 8, "params_total": 8, "finite": True, "ranks_agree": True}
    aborted = harness.Run(-6, "terminate called without an active exception\n", 3.0)
    runs = {"flaky": [aborted, harness.Run(0, "", 4.0, trained)], "broken": [aborted, aborted]}
    monkeypatch.setattr(harness, "run_script", lambda script, *args: runs[script.name].pop(0))
    ok, detail, seconds = harness._run_and_judge(tmp_path / "flaky", harness.judge_fixed, tmp_path, "cpu", 2, 60, ())
    assert ok and seconds == 7.0
    assert detail == "loss 1→0.5, 8/8 updated (2nd run; 1st: exit -6: terminate called without an active exception)"
    ok, detail, _ = harness._run_and_judge(tmp_path / "broken", harness.judge_fixed, tmp_path, "cpu", 2, 60, ())
    assert not ok and detail.startswith("exit -6")
    assert runs == {"flaky": [], "broken": []}


def test_losses_are_compared_with_the_original():
    trained = {"losses": [1.0, 0.5, 0.25], "params_updated": 8, "params_total": 8, "finite": True, "ranks_agree": True}
    original = harness.Run(0, "", 1.0, trained)
    close = harness.Run(0, "", 1.0, {**trained, "losses": [1.0, 0.50001, 0.25]})
    ok, detail = harness.judge_same_losses(original, close, rtol=1e-4, atol=0)
    assert ok and detail.endswith("losses match the original (max diff 1e-05)")
    apart = harness.Run(0, "", 1.0, {**trained, "losses": [1.0, 0.6, 0.3]})
    ok, detail = harness.judge_same_losses(original, apart, rtol=1e-4, atol=1e-6)
    assert not ok and detail.startswith("losses differ from the original by up to 0.1")
    assert harness.judge_same_losses(original, harness.Run(0, "", 1.0, {**trained, "losses": [1.0, 0.5]}), 1e-4, 0) == (
        False, "2 losses where the original has 3")
    assert harness.judge_same_losses(None, close, 1e-4, 0) == (False, "the original gave no losses to compare with")
    # The migrated script must train in its own right first.
    assert not harness.judge_same_losses(original, harness.Run(1, "RuntimeError: boom\n", 1.0), 1e-4, 0)[0]
    assert harness.judge_bad({"symptom": "none"}, original) == (True, "none, trains: loss 1→0.25, 8/8 updated")
    assert not harness.judge_bad({"symptom": "none"}, harness.Run(1, "RuntimeError: boom\n", 1.0))[0]


def test_a_rule_may_have_a_case_per_shape(tmp_path: Path):
    for folder in ("FSDP998", "FSDP999/first", "FSDP999/second"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "verify.toml").write_text('[bad]\nsymptom = "none"\n[fixed]\ncompare = "losses"\nrtol = 0.01\n')
    (tmp_path / "FSDP999" / "second" / "verify.toml").write_text('[bad]\nsymptom = "error"\n[run]\ndevices = ["cuda"]\n')
    cases = harness.load_cases(tmp_path)
    assert [(case.rule, case.name) for case in cases] == [("FSDP998", "FSDP998"), ("FSDP999", "FSDP999/first"), ("FSDP999", "FSDP999/second")]
    assert cases[1].compare == {"rtol": 0.01, "atol": 1e-6} and cases[2].compare is None
    assert cases[2].launch.devices == ("cuda",)
    assert [case.name for case in harness.load_cases(tmp_path, ["FSDP999"])] == ["FSDP999/first", "FSDP999/second"]
    assert [case.name for case in harness.load_cases(tmp_path, ["fsdp999/second"])] == ["FSDP999/second"]


def test_verify_toml_is_validated(tmp_path: Path):
    (tmp_path / "FSDP999").mkdir()
    (tmp_path / "FSDP999" / "verify.toml").write_text('[bad]\nsymptom = "wrong-state"\n')
    with pytest.raises(harness.VerifyError, match="needs `check`"):
        harness.load_cases(tmp_path)
    with pytest.raises(harness.VerifyError, match="no verify.toml for FSDP000"):
        harness.load_cases(tmp_path, ["FSDP000"])
    (tmp_path / "FSDP999" / "verify.toml").write_text('[bad]\nsymptom = "error"\n[fixed]\ncompare = "losses"\n')
    with pytest.raises(harness.VerifyError, match='needs \\[bad\\] symptom = "none"'):
        harness.load_cases(tmp_path)


def test_without_torch_verify_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    result = CliRunner().invoke(main, ["verify"])
    assert result.exit_code == 2
    # fsdplint is not on PyPI: the hint installs from the repository, or from a checkout.
    assert "pip install 'fsdplint[verify] @ git+https://github.com/fsdplint/fsdplint'" in result.output
    assert "pip install -e '.[verify]'" in result.output


def test_linting_never_imports_torch(tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text("from torch.distributed.fsdp import fully_shard\nfully_shard(model)\nmodel.forward(x)\n")
    probe = (
        "import sys\n"
        "from fsdplint.cli import main\n"
        f"try:\n    main(['check', {str(script)!r}])\n"
        "except SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'fsdplint check imported torch'\n"
        "import fsdplint.harness\n"
        "assert 'torch' not in sys.modules, 'importing fsdplint.harness imported torch'\n"
    )
    completed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr


def test_a_row_that_cannot_run_here_is_skipped_with_its_reason(tmp_path: Path):
    folder = tmp_path / "FSDP998"
    folder.mkdir()
    (folder / "verify.toml").write_text('[bad]\nsymptom = "error"\n[fixed]\nsource = "good"\n'
                                        '[run]\ndevices = ["cuda"]\nmin_gpus = 2\nreason = "two GPUs show it"\n')
    case, = harness.load_cases(tmp_path)
    cpu = harness.verify_case(case, "cpu", 2, tmp_path, 60, (), tmp_path, gpus=0)
    one_gpu = harness.verify_case(case, "cuda", 1, tmp_path, 60, (), tmp_path, gpus=1)
    assert cpu.skipped == "runs on cuda only: two GPUs show it"
    assert one_gpu.skipped == "needs 2 GPUs, 1 visible: two GPUs show it"
    assert not cpu.passed and not cpu.failed
    assert harness.format_row(cpu).startswith("SKIP  FSDP998")
    report = harness.Report("2.13", "3.11", "linux", "today", ["cpu × 2"], rows=[cpu])
    assert not report.passed and harness.summary(report) == "0/1 passed, 1 skipped; nothing verified."
    assert "| FSDP998 | cpu × 2 | skipped: runs on cuda only: two GPUs show it |" in harness.markdown(report)
    trained = harness.Row("FSDP997", "cpu", 2, "good.py", bad_ok=True, fixed_ok=True)
    report.rows.append(trained)
    assert report.passed and harness.summary(report) == "1/2 passed, 1 skipped; all verified."


def test_simulated_nodes_need_a_gpu_each_on_cuda_rows_and_share_on_cpu_rows():
    launch = harness.Launch(nnodes=2, nproc_per_node=1, gpus_per_node=1, min_gpus=1)
    assert launch.skip_reason("cuda", 1, 2) == "needs 2 GPUs, 1 visible"
    assert launch.skip_reason("cuda", 2, 2) is None and launch.skip_reason("cpu", 1, 2) is None
    assert launch.skip_reason("cpu", 0, 2) == "needs 1 GPU, 0 visible"
    assert [harness._node_gpus(launch, node, 2) for node in (0, 1)] == [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}]
    assert [harness._node_gpus(launch, node, 1) for node in (0, 1)] == [{"CUDA_VISIBLE_DEVICES": "0"}] * 2


def test_a_symptom_between_ranks_skips_a_row_of_one_rank():
    launch = harness.Launch(min_ranks=2, reason="ranks must differ")
    assert launch.skip_reason("cuda", 1, 1) == "needs 2 ranks, this row has 1: ranks must differ"
    assert launch.skip_reason("cuda", 2, 2) is None and launch.skip_reason("cpu", 0, 2) is None


def test_run_table_is_validated(tmp_path: Path):
    (tmp_path / "FSDP999").mkdir()
    spec = tmp_path / "FSDP999" / "verify.toml"
    spec.write_text('[bad]\nsymptom = "error"\n[run]\nnodes = 2\n')
    with pytest.raises(harness.VerifyError, match="unknown \\[run\\] keys nodes"):
        harness.load_cases(tmp_path)
    spec.write_text('[bad]\nsymptom = "error"\n[run]\ndevices = ["tpu"]\n')
    with pytest.raises(harness.VerifyError, match="devices must be cpu or cuda"):
        harness.load_cases(tmp_path)


def test_a_fix_that_needs_more_gpus_still_runs_the_bad_script(tmp_path: Path, monkeypatch):
    folder = tmp_path / "FSDP998"
    folder.mkdir()
    (folder / "verify.toml").write_text('[bad]\nsymptom = "error"\nmatch = "Duplicate GPU detected"\n'
                                        '[fixed]\nsource = "good"\nmin_gpus = 2\n[run]\ndevices = ["cuda"]\nmin_gpus = 1\n')
    case, = harness.load_cases(tmp_path)
    refused = harness.Run(1, "[rank1]: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60\n", 5.0)
    monkeypatch.setattr(harness, "run_script", lambda script, *args: refused)
    row = harness.verify_case(case, "cuda", 2, tmp_path, 60, (), tmp_path, gpus=1)
    assert row.bad_ok and row.bad_detail == "error: Duplicate GPU detected"
    assert row.skipped == "the fixed script needs 2 GPUs, 1 visible"
    assert not row.passed and not row.failed
    assert harness.format_row(row).startswith("SKIP  FSDP998")
    assert "not run: the fixed script needs 2 GPUs, 1 visible" in harness.format_row(row)
    report = harness.Report("2.11", "3.12", "linux", "today", ["cuda × 2"], rows=[row])
    assert "| error: Duplicate GPU detected | good.py | not run: the fixed script needs 2 GPUs, 1 visible | 5.0 | symptom shown, fix skipped |" in harness.markdown(report)
    assert harness.summary(report) == "0/1 passed, 1 skipped; nothing verified."

    monkeypatch.setattr(harness, "run_script", lambda script, *args: harness.Run(0, "", 5.0))
    silent = harness.verify_case(case, "cuda", 2, tmp_path, 60, (), tmp_path, gpus=1)
    assert silent.failed and harness.format_row(silent).startswith("FAIL  FSDP998")
    assert harness.summary(harness.Report("2.11", "3.12", "linux", "today", [], rows=[silent])) == "0/1 passed; FAILED: FSDP998 (cuda)."


@needs_torch
def test_checks_reported_at_exit_extend_the_result_line(tmp_path: Path):
    script = tmp_path / "script.py"
    script.write_text("import fixture_support\n"
                      "fixture_support.report_at_exit(done=lambda: fixture_support.FINISHED)\n"
                      "fixture_support._reported.append({'losses': [1.0, 0.5]})\n"
                      "fixture_support.FINISHED = True\n")
    completed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False,
                               env={**os.environ, "PYTHONPATH": str(FIXTURES)})
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines()[-1] == 'FSDPLINT_RESULT {"losses": [1.0, 0.5], "done": true}'


@needs_torch
def test_simulated_nodes_are_one_torchrun_agent_each(tmp_path: Path):
    launch = harness.Launch(nnodes=2, nproc_per_node=1)
    run = harness.run_script(SELF_TESTS / "nodes.py", tmp_path, "cpu", 2, timeout=120, launch=launch)
    assert run.returncode == 0, run.output
    lines = sorted(line for line in run.output.splitlines() if line.startswith("NODE "))
    assert lines == ["NODE 0 RANK 0 LOCAL_RANK 0 WORLD 2 GPUS -", "NODE 1 RANK 1 LOCAL_RANK 0 WORLD 2 GPUS -"]
