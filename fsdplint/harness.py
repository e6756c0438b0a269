"""`fsdplint verify`: prove each rule by running it.

For every case with a `verify.toml` (`<fixtures>/<CODE>/`, or `<fixtures>/<CODE>/<shape>/` when a
rule has several scripts), run `bad.py` under torchrun and check that it shows the documented
symptom (an error message, a hang cut short by the process-group timeout, or a wrong state the
script measures; `none` for a script that is right as it is, such as an FSDP1 original to
migrate), then run the script that fsdplint's own fix makes of `bad.py` (or `good.py`, for rules
without a fix) and check that it trains, and with `compare = "losses"` that it trains to the same
losses as `bad.py`, within `rtol`/`atol`. The expectations live in each `verify.toml`; nothing here
knows a rule. Importing this module does not import torch.

A `[run]` table in `verify.toml` says where a symptom can be shown, when it cannot be everywhere:
`devices` (the row devices it runs on), `min_gpus` (CUDA devices that must be visible), `min_ranks`
(a symptom that is a difference between ranks needs two; a CUDA row has one rank per GPU), `nnodes`
(nodes simulated on this machine, one torchrun agent each), `nproc_per_node`, `gpus_per_node` (each
simulated node sees only its own GPUs, as a node of a cluster does) and `reason`. A row that cannot
run here is reported as skipped, with the reason, never as passed. `[fixed] min_gpus` is for a fix
that needs more GPUs than the symptom (each rank its own GPU, where the bad script puts two ranks on
one): with fewer, the bad script still runs and must show its symptom, and the row is skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from fsdplint import install_commands

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

RESULT_PREFIX = "FSDPLINT_RESULT "
PG_TIMEOUT_SECONDS = 15  # the scripts' process-group timeout: how long a hang lasts before it errors
SYMPTOMS = ("error", "hang", "wrong-state", "none")
HANG_MESSAGES = ("Timed out", "timed out", "Timeout")  # a `hang` with no `match` of its own


class VerifyError(Exception):
    """A problem with the fixtures or the environment, not with a rule."""


@dataclass
class Launch:
    """[run] of verify.toml: where the symptom can be shown and how the ranks are launched."""

    devices: tuple[str, ...] = ()  # empty: every device of the plan
    min_gpus: int = 0
    min_ranks: int = 1
    nnodes: int = 1
    nproc_per_node: int | None = None  # None: the plan's
    gpus_per_node: int | None = None  # None: every simulated node sees every GPU
    reason: str = ""

    def skip_reason(self, device: str, gpus: int, ranks: int) -> str | None:
        """Why a row on `device` with `ranks` ranks, on a machine with `gpus` visible GPUs, cannot show
        the symptom."""
        why = f": {self.reason}" if self.reason else ""
        if self.devices and device not in self.devices:
            return f"runs on {', '.join(self.devices)} only{why}"
        if ranks < self.min_ranks:
            return f"needs {self.min_ranks} ranks, this row has {ranks}{why}"
        needed = max(self.min_gpus, self.nnodes * self.gpus_per_node if device == "cuda" and self.gpus_per_node else 0)
        if gpus < needed:
            return f"needs {needed} GPU{'s' if needed > 1 else ''}, {gpus} visible{why}"
        return None


@dataclass
class Case:
    rule: str  # the rule code: the first folder under the fixtures
    name: str  # `FSDP104`, or `FSDP501/no_sync` for one of a rule's several scripts
    folder: Path
    bad: dict  # [bad] of verify.toml
    fixed_source: str  # "fix" or "good"
    compare: dict | None = None  # {"rtol": ..., "atol": ...}: the fixed script's losses must match bad.py's
    launch: Launch = field(default_factory=Launch)
    fixed_min_gpus: int = 0  # [fixed] min_gpus: CUDA devices the fixed script needs


@dataclass
class Run:
    returncode: int | None  # None: killed at the wall-clock limit
    output: str
    seconds: float
    result: dict | None = None

    @property
    def killed(self) -> bool:
        return self.returncode is None


@dataclass
class Row:
    rule: str
    device: str
    nproc: int
    fixed_source: str
    bad_ok: bool = False
    bad_detail: str = ""
    fixed_ok: bool = False
    fixed_detail: str = ""
    seconds: float = 0.0
    skipped: str = ""  # why the row, or its fixed script, did not run here

    @property
    def passed(self) -> bool:
        return self.bad_ok and self.fixed_ok

    @property
    def bad_ran(self) -> bool:
        return bool(self.bad_detail)

    @property
    def failed(self) -> bool:
        """A symptom not shown fails the row even when its fixed script could not run."""
        return (self.bad_ran and not self.bad_ok) or (not self.passed and not self.skipped)


@dataclass
class Report:
    torch_version: str
    python_version: str
    platform: str
    date: str
    devices: list[str]
    rows: list[Row] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Nothing failed and something ran: skipped rows neither pass nor fail."""
        return any(row.passed for row in self.rows) and not any(row.failed for row in self.rows)


def default_fixtures() -> Path:
    """The fixtures shipped in the package (the build maps tests/fixtures there), else, in an editable
    install, the checkout's tests/fixtures itself."""
    package = Path(__file__).resolve().parent
    for candidate in (package / "fixtures", package.parent / "tests" / "fixtures"):
        if candidate.is_dir():
            return candidate
    raise VerifyError(f"no fixtures in {package} (an incomplete install?); reinstall fsdplint or pass --fixtures DIR")


def load_cases(fixtures: Path, rules: Iterable[str] = ()) -> list[Case]:
    """The cases under `fixtures`; `rules` picks rule codes (every script of the rule) or case names."""
    wanted = {rule.upper() for rule in rules}
    cases = []
    for spec in sorted([*fixtures.glob("*/verify.toml"), *fixtures.glob("*/*/verify.toml")]):
        folder = spec.parent
        name = folder.relative_to(fixtures).as_posix()
        rule = name.split("/")[0].upper()
        if wanted and rule not in wanted and name.upper() not in wanted:
            continue
        with spec.open("rb") as handle:
            expectation = tomllib.load(handle)
        cases.append(_case(spec, rule, name, folder, expectation))
    missing = wanted - {case.rule for case in cases} - {case.name.upper() for case in cases}
    if missing:
        raise VerifyError(f"no verify.toml for {', '.join(sorted(missing))} under {fixtures}")
    if not cases:
        raise VerifyError(f"no */verify.toml under {fixtures}")
    return cases


def _launch(spec: Path, table: dict) -> Launch:
    known = {"devices", "min_gpus", "min_ranks", "nnodes", "nproc_per_node", "gpus_per_node", "reason"}
    unknown = set(table) - known
    if unknown:
        raise VerifyError(f"{spec}: unknown [run] keys {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")
    launch = Launch(**{**table, "devices": tuple(table.get("devices", ()))})
    if not set(launch.devices) <= {"cpu", "cuda"}:
        raise VerifyError(f"{spec}: [run] devices must be cpu or cuda")
    return launch


def _case(spec: Path, rule: str, name: str, folder: Path, expectation: dict) -> Case:
    bad = expectation.get("bad", {})
    fixed = expectation.get("fixed", {})
    source = fixed.get("source", "fix")
    if bad.get("symptom") not in SYMPTOMS:
        raise VerifyError(f"{spec}: [bad] symptom must be one of {', '.join(SYMPTOMS)}")
    if bad["symptom"] == "wrong-state" and not bad.get("check"):
        raise VerifyError(f"{spec}: a wrong-state symptom needs `check`, the result key that must fail")
    if source not in ("fix", "good"):
        raise VerifyError(f"{spec}: [fixed] source must be fix or good")
    compare = None
    if "compare" in fixed:
        if fixed["compare"] != "losses" or bad["symptom"] != "none":
            raise VerifyError(f'{spec}: [fixed] compare = "losses" is the one comparison, and needs [bad] symptom = "none"')
        compare = {"rtol": float(fixed.get("rtol", 1e-5)), "atol": float(fixed.get("atol", 1e-6))}
    return Case(rule, name, folder, bad, source, compare, _launch(spec, expectation.get("run", {})), int(fixed.get("min_gpus", 0)))


def device_plan(requested: str, nproc: int | None) -> list[tuple[str, int]]:
    """(device, ranks) per run: CPU with 2 ranks; CUDA with one rank per GPU, and on a single GPU also
    2 CPU ranks, since some symptoms need a second rank."""
    import torch

    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cpu":
        return [("cpu", nproc or 2)]
    if not torch.cuda.is_available():
        raise VerifyError("--device cuda: no CUDA device is visible")
    ranks = nproc or torch.cuda.device_count()
    return [("cuda", ranks), ("cpu", 2)] if ranks == 1 else [("cuda", ranks)]


def _process_groups(root: int) -> set[int]:
    """The process groups of `root` and all its descendants. torchrun starts each rank in a session of
    its own, so killing torchrun's group alone would leave the ranks running; /proc finds them (where
    there is no /proc, only torchrun's group is known)."""
    children: dict[int, list[tuple[int, int]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            _state, parent, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
            children.setdefault(int(parent), []).append((int(stat.parent.name), int(group)))
    groups, pending = {root}, [root]
    while pending:
        for pid, group in children.get(pending.pop(), []):
            groups.add(group)
            pending.append(pid)
    return groups


def run_script(script: Path, fixtures: Path, device: str, nproc: int, timeout: float, torchrun_args: tuple[str, ...] = (),
               launch: Launch = Launch(), gpus: int = 0) -> Run:
    """Run under torchrun in a session of its own; past `timeout`, kill it and every rank.

    With `launch.nnodes` > 1, one torchrun agent per simulated node, all on this machine (static
    rendezvous on a local port), started together; the run ends when all have.

    Each run gets a temporary folder of its own as TMPDIR, removed when it ends: what the script and
    torchrun write to the temp folder (checkpoints, torchelastic's logs) goes with it."""
    with tempfile.TemporaryDirectory(prefix="fsdplint-run-", ignore_cleanup_errors=True) as scratch:
        env = {
            **os.environ,
            "TMPDIR": scratch,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(fixtures), os.environ.get("PYTHONPATH")])),
            "FSDPLINT_DEVICE": device,
            "FSDPLINT_PG_TIMEOUT": str(PG_TIMEOUT_SECONDS),
            "OMP_NUM_THREADS": "1",  # torchrun would warn and pick 1 anyway; ranks share the cores
        }
        nproc = launch.nproc_per_node or nproc
        if launch.nnodes == 1:
            agents = [(list(torchrun_args) or ["--standalone"], env)]
        else:
            port = _free_port()
            agents = [([f"--nnodes={launch.nnodes}", f"--node_rank={node}", "--master_addr=127.0.0.1", f"--master_port={port}"],
                       {**env, **_node_gpus(launch, node, gpus)}) for node in range(launch.nnodes)]
        start = time.monotonic()
        processes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *arguments, f"--nproc_per_node={nproc}", str(script)],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=agent_env, start_new_session=True)
                     for arguments, agent_env in agents]
        outputs, codes = [], []
        for process in processes:
            try:
                output, _ = process.communicate(timeout=max(1.0, timeout - (time.monotonic() - start)))
                codes.append(process.returncode)
            except subprocess.TimeoutExpired:
                for group in _process_groups(process.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(group, signal.SIGKILL)
                output, _ = process.communicate()
                codes.append(None)
            outputs.append(output)
        output = "".join(outputs)
        returncode = None if None in codes else next((code for code in codes if code != 0), 0)
    results = [json.loads(line[len(RESULT_PREFIX):]) for line in output.splitlines() if line.startswith(RESULT_PREFIX)]
    return Run(returncode, output, time.monotonic() - start, results[-1] if results else None)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _node_gpus(launch: Launch, node: int, gpus: int) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES for a simulated node that has `gpus_per_node` GPUs of its own. Where the
    machine has fewer (a CPU row), nodes share them: gloo does not mind."""
    if not launch.gpus_per_node or not gpus:
        return {}
    first = node * launch.gpus_per_node
    return {"CUDA_VISIBLE_DEVICES": ",".join(str((first + i) % gpus) for i in range(launch.gpus_per_node))}


def failed_checks(result: dict) -> list[str]:
    """The checks a result fails; a script that trains passes them all, extras (any boolean) included."""
    failed = []
    losses = result.get("losses") or []
    if len(losses) < 2 or not losses[-1] < losses[0]:
        failed.append("loss_decreases")
    if result.get("params_updated") != result.get("params_total"):
        failed.append("params_updated")
    failed += [check for check in ("finite", "ranks_agree") if result.get(check) is not True]
    failed += [key for key, value in result.items() if value is False and key not in failed]
    return failed


# The line a traceback ends with, maybe behind torchrun's "[rank0]: " prefix.
_EXCEPTION_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)?((?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)\b.*)$")


def last_error(output: str) -> str:
    """The last exception a rank raised, else the last line printed: short enough for a table cell."""
    errors = [match.group(1) for match in map(_EXCEPTION_LINE.match, output.splitlines()) if match]
    errors = [line for line in errors if not line.startswith("torch.distributed.elastic")]  # torchrun's own summary
    lines = [line for line in output.splitlines() if line.strip()]
    text = errors[-1] if errors else lines[-1] if lines else "no output"
    return text.strip()[:160]


def _describe(result: dict) -> str:
    losses = result.get("losses") or [float("nan")]
    return f"loss {losses[0]:.3g}→{losses[-1]:.3g}, {result.get('params_updated')}/{result.get('params_total')} updated"


def _ended(run: Run) -> str:
    return f"killed after {run.seconds:.0f} s" if run.killed else f"exit {run.returncode}: {last_error(run.output)}"


def judge_bad(bad: dict, run: Run) -> tuple[bool, str]:
    """Whether the bad script showed its documented symptom, and what it did."""
    symptom = bad["symptom"]
    if symptom == "none":
        ok, detail = judge_fixed(run)
        return ok, f"none, trains: {detail}" if ok else f"expected it to train: {detail}"
    if symptom == "wrong-state":
        check = bad["check"]
        if run.returncode != 0 or run.result is None:
            return False, f"expected wrong {check}, but the script did not finish: {_ended(run)}"
        if check in failed_checks(run.result):
            shown = _describe(run.result) if check in ("loss_decreases", "params_updated") else f"{check}={run.result.get(check)}"
            return True, f"wrong {check}: {shown}"
        return False, f"expected wrong {check}, but the script trained: {_describe(run.result)}"
    if symptom == "hang" and run.killed:
        return True, f"hang: killed after {run.seconds:.0f} s"
    expected = [bad["match"]] if bad.get("match") else list(HANG_MESSAGES) if symptom == "hang" else []
    seen = next((text for text in expected if text in run.output), None)
    if run.returncode not in (0, None) and (seen or not expected):
        return True, f"{symptom}: {seen or last_error(run.output)}"
    wanted = f"{symptom} `{expected[0]}`" if expected else symptom
    return False, f"expected {wanted}, got {'exit 0' if run.returncode == 0 else _ended(run)}"


def judge_fixed(run: Run) -> tuple[bool, str]:
    """Whether the fixed script trains: exit 0 and every check of its result line holds."""
    if run.returncode != 0:
        return False, _ended(run)
    if run.result is None:
        return False, f"exit 0 but no {RESULT_PREFIX.strip()} line"
    failed = failed_checks(run.result)
    if failed:
        return False, f"failed {', '.join(failed)}: {_describe(run.result)}"
    return True, _describe(run.result)


def judge_same_losses(reference: Run | None, run: Run, rtol: float, atol: float) -> tuple[bool, str]:
    """Whether the fixed script trains to the losses of the original (`reference`), step by step."""
    ok, detail = judge_fixed(run)
    if not ok:
        return ok, detail
    expected = (reference.result or {}).get("losses") if reference else None
    if not expected:
        return False, "the original gave no losses to compare with"
    losses = run.result["losses"]
    if len(losses) != len(expected):
        return False, f"{len(losses)} losses where the original has {len(expected)}"
    worst = max(abs(mine - theirs) for mine, theirs in zip(losses, expected))
    if any(abs(mine - theirs) > atol + rtol * abs(theirs) for mine, theirs in zip(losses, expected)):
        return False, f"losses differ from the original by up to {worst:.3g} (rtol {rtol:g}, atol {atol:g}): {losses} vs {expected}"
    return True, f"{detail}, losses match the original (max diff {worst:.2g})"


def fixed_script(case: Case, workdir: Path) -> Path | None:
    """fsdplint's own fix of bad.py, made in memory and written to `workdir`, or good.py; None when
    the fix changes nothing."""
    if case.fixed_source == "good":
        return case.folder / "good.py"
    # Looked up at call time, so that a test can swap in a broken fix.
    from fsdplint import api

    bad_path = case.folder / "bad.py"
    bad = bad_path.read_text(encoding="utf-8")
    fixed = api.fix_source(bad, str(bad_path), select=[case.rule], unsafe_fixes=True)
    if fixed == bad:
        return None
    path = workdir / case.name / "fixed.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(fixed, encoding="utf-8")
    return path


def _run_and_judge(script: Path, judge: Callable[[Run], tuple[bool, str]], fixtures: Path, device: str, nproc: int,
                   timeout: float, torchrun_args: tuple[str, ...], *launch) -> tuple[bool, str, float]:
    """Run and judge once, and once more if that failed: torch's process groups can abort a rank while
    the interpreter exits, after the work is done. A pass on the second run says so in the row."""
    run = run_script(script, fixtures, device, nproc, timeout, torchrun_args, *launch)
    ok, detail = judge(run)
    if ok:
        return ok, detail, run.seconds
    second = run_script(script, fixtures, device, nproc, timeout, torchrun_args, *launch)
    second_ok, second_detail = judge(second)
    if second_ok:
        return True, f"{second_detail} (2nd run; 1st: {detail})", run.seconds + second.seconds
    return False, detail, run.seconds + second.seconds


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def verify_case(case: Case, device: str, nproc: int, fixtures: Path, timeout: float, torchrun_args: tuple[str, ...], workdir: Path,
                gpus: int = 0) -> Row:
    launch = case.launch
    ranks = (launch.nproc_per_node or nproc) * launch.nnodes
    row = Row(case.name, device, ranks, "fsdplint fix" if case.fixed_source == "fix" else "good.py")
    row.skipped = launch.skip_reason(device, gpus, ranks) or ""
    if row.skipped:
        return row
    where = (fixtures, device, nproc, timeout, torchrun_args, launch, gpus)
    bad_runs: list[Run] = []

    def judge_and_keep(run: Run) -> tuple[bool, str]:
        bad_runs.append(run)  # the last one judged is the reference the fixed script is compared with
        return judge_bad(case.bad, run)

    row.bad_ok, row.bad_detail, row.seconds = _run_and_judge(case.folder / "bad.py", judge_and_keep, *where)
    if device == "cuda" and gpus < case.fixed_min_gpus:
        row.skipped = f"the fixed script needs {case.fixed_min_gpus} GPUs, {gpus} visible"
        return row
    script = fixed_script(case, workdir)
    if script is None:
        row.fixed_detail = "fix produced no change"
        return row
    def judge(run: Run) -> tuple[bool, str]:
        if case.compare is not None:
            return judge_same_losses(bad_runs[-1] if row.bad_ok else None, run, **case.compare)
        return judge_fixed(run)

    row.fixed_ok, row.fixed_detail, seconds = _run_and_judge(script, judge, *where)
    row.seconds += seconds
    return row


def describe_devices(plan: list[tuple[str, int]]) -> list[str]:
    import torch

    names = {"cpu": f"CPU ({platform.processor() or platform.machine()}), gloo"}
    if any(device == "cuda" for device, _ in plan):
        names["cuda"] = f"{torch.cuda.get_device_name(0)}, NCCL"
    return [f"{device} × {nproc}: {names[device]}" for device, nproc in plan]


def verify_all(cases: list[Case], plan: list[tuple[str, int]], fixtures: Path, timeout: float,
               torchrun_args: tuple[str, ...] = (), progress: Callable[[Row], None] = lambda row: None) -> Report:
    import torch

    report = Report(
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        platform=platform.platform(),
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        devices=describe_devices(plan),
    )
    gpus = visible_gpus()
    with tempfile.TemporaryDirectory(prefix="fsdplint-verify-") as workdir:
        for case in cases:
            for device, nproc in plan:
                row = verify_case(case, device, nproc, fixtures, timeout, torchrun_args, Path(workdir), gpus)
                report.rows.append(row)
                progress(row)
    return report


TABLE_HEADER = f"{'':4}  {'rule':<24} {'device':<7} {'secs':>5}  {'bad: symptom seen':<52}  fixed: trains?"


def _verdict(row: Row) -> str:
    return "FAIL" if row.failed else "PASS" if row.passed else "SKIP"


def _bad_cell(row: Row) -> str:
    return ("" if row.bad_ok else "NO: ") + row.bad_detail


def _fixed_cell(row: Row) -> str:
    """What the fixed script did, or why it did not run after the bad script did."""
    return f"not run: {row.skipped}" if row.skipped else ("" if row.fixed_ok else "NO: ") + row.fixed_detail


def format_row(row: Row) -> str:
    if row.skipped and not row.bad_ran:
        return f"SKIP  {row.rule:<24} {row.device}x{row.nproc:<3} {row.seconds:5.1f}  {row.skipped}"
    return f"{_verdict(row)}  {row.rule:<24} {row.device}x{row.nproc:<3} {row.seconds:5.1f}  {_bad_cell(row):<52}  {_fixed_cell(row)} ({row.fixed_source})"


def summary(report: Report) -> str:
    failed = [f"{row.rule} ({row.device})" for row in report.rows if row.failed]
    skipped = sum(bool(row.skipped) and not row.failed for row in report.rows)
    passed = sum(row.passed for row in report.rows)
    verdict = f"FAILED: {', '.join(failed)}" if failed else "all verified" if passed else "nothing verified"
    return f"{passed}/{len(report.rows)} passed{f', {skipped} skipped' if skipped else ''}; {verdict}."


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


def markdown(report: Report) -> str:
    lines = [
        "# Verification",
        "",
        "Generated by `fsdplint verify --report docs/verification`. For each rule, `bad.py` runs under torchrun",
        "and must show the symptom its `verify.toml` documents; then the script fsdplint's own fix makes of",
        "`bad.py` (or `good.py`, for rules without a fix) must train: exit 0, finite and decreasing loss,",
        "every parameter updated, ranks in agreement, and every extra check true (a checkpoint a fresh",
        "process can load, ...). A migration (FSDP501) runs its FSDP1 original (symptom `none`: it trains)",
        "and the migrated script must train to the same losses. The expectations come from each",
        "`tests/fixtures/<CODE>/verify.toml` (or `<CODE>/<shape>/verify.toml` for a rule with several scripts).",
        "A row marked skipped needs what this machine lacks (CUDA, more GPUs; its `[run]` table says why):",
        "it did not run and is not a pass.",
        "",
        "To reproduce: `{}` (or `{}` in a checkout), then `fsdplint verify`".format(*install_commands("verify")),
        "(`--device cpu|cuda|auto`, `--rule CODE`, `--nproc N`, `--timeout S`; for several nodes,",
        "`--torchrun-arg=--nnodes=2 --torchrun-arg=--rdzv-endpoint=HOST:PORT ...` replaces `--standalone`).",
        "",
        f"- torch {report.torch_version}, Python {report.python_version}, {report.platform}",
        *[f"- {device}" for device in report.devices],
        f"- {report.date}",
        "",
        "| Rule | Device | Bad script: symptom seen | Fixed by | Fixed script trains? | Seconds | Result |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in report.rows:
        if row.skipped and not row.bad_ran:
            lines.append(f"| {row.rule} | {row.device} × {row.nproc} | skipped: {_cell(row.skipped)} | {row.fixed_source} | | | skipped |")
            continue
        result = "**FAIL**" if row.failed else "pass" if row.passed else "symptom shown, fix skipped"
        lines.append(f"| {row.rule} | {row.device} × {row.nproc} | {_cell(_bad_cell(row))} | {row.fixed_source} | {_cell(_fixed_cell(row))} "
                     f"| {row.seconds:.1f} | {result} |")
    lines += ["", summary(report), ""]
    return "\n".join(lines)


def write_report(report: Report, path: Path) -> list[Path]:
    """PATH.json and PATH.md (PATH may end in .json or .md)."""
    base = path.with_suffix("") if path.suffix in (".json", ".md") else path
    json_path, md_path = base.with_name(base.name + ".json"), base.with_name(base.name + ".md")
    data = {**asdict(report), "passed": report.passed, "rows": [{**asdict(row), "passed": row.passed} for row in report.rows]}
    json_path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    md_path.write_text(markdown(report), encoding="utf-8")
    return [json_path, md_path]
