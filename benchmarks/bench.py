"""Benchmark fsdplint on real repositories, against ruff and TorchFix, and check the cost targets.

    python benchmarks/bench.py --repos DIR [--only NAME,...] [--rounds 5] [--timeout 300]
    python benchmarks/bench.py --corpus            # the generated monorepo instead (benchmarks/corpus.py)

The repositories
----------------
The default set is REPOSITORIES below: sympy (a large repository with no FSDP code) and five that use
FSDP. They are never committed: DIR holds one checkout per repository, named as in the table
(DIR/sympy, DIR/accelerate, ...). Get them with

    git clone --depth 1 https://github.com/sympy/sympy DIR/sympy        # and so on for each row

or let `--fetch` run those clones for the ones missing. DIR defaults to ~/.cache/fsdplint-bench/repos.
No fixed commit is asked for: the commit measured (`git rev-parse HEAD`) is printed for each one, so
that a figure can be reproduced. More folders can be given as arguments; they are measured the same
way (as FSDP code if fsdplint parses any of their files, else as code with none).

What it measures, for each repository
-------------------------------------
Rounds alternate the commands (the order reverses every other round) and every figure is the median
over the rounds, with min and max: the machine is shared and noisy. In each round:
- fsdplint cold: `fsdplint check --no-cache -v .` in the checkout;
- fsdplint warm: the same with `--cache-dir` pointing at a cache filled before the rounds, nothing changed;
- ruff: `ruff check --no-cache --isolated --select E9 .` (syntax errors only: what reading and parsing
  every file costs a fast tool; `--isolated` so that no ruff configuration, the repository's or the
  user's, narrows or widens the files it checks);
- the parse floor: the files fsdplint parsed, parsed again by LibCST (`libcst.parse_module`) in a fresh
  process, each timed alone; the floor is the longest-processing-time-first schedule of those times on
  the machine's cores (`--cores`): what parsing those files costs when nothing else is done. Which
  files fsdplint parsed is recorded in one more, untimed, cold run, through a `sitecustomize` that
  wraps `libcst.parse_module` in every process of the run (the pool's workers included) and saves each
  source it is given; the count is checked against what `-v` says.
Before the rounds, untimed: a run that fills the cache (a cold run too), one cold and one warm run
whose memory is measured, and the run that records the parsed files. Once per repository: TorchFix
(`torchfix --select ALL .` on the whole tree, one run, `--torchfix-timeout`). Files read, parsed and
served from the cache are what fsdplint's `-v` prints.

Time is wall time from the start of the command to its exit, from a monotonic clock; the bench blocks
in waitid() meanwhile, so it sees the exit at once. Every command runs in a session of its own under a
time limit (`--timeout`, four times that for the four copies): one that runs past it is killed, its
whole process group, and reported as timed out rather than hanging the bench.

Peak memory is that of the whole process tree, not of its biggest process (fsdplint analyzes in a
process pool), measured in the untimed runs (and TorchFix's), never in a timed one, so that sampling
cannot slow what is timed: while the command runs, a thread of the bench walks its tree every `--poll-ms`
milliseconds (each process's children, from /proc/PID/task/TID/children) and sums the resident set
sizes (/proc/PID/statm); the peak is the largest sum seen, and never less than the largest single
process's own peak (ru_maxrss from wait4). Pages that forked workers share with their parent are
counted in each of them, so the figure errs high; a peak shorter than the poll interval may be missed.
No psutil and no cgroup are needed; without /proc the figure is the largest single process only.

Then, once:
- one file edited: the FSDP repository whose file count is nearest 500 (`--edit-repo`) is copied
  (without .git) and its cache filled; in each round one FSDP file that fsdplint parses (the median one
  by size among those holding `fully_shard` or `FullyShardedDataParallel`) gets a new statement at its
  end and fsdplint runs warm, paired with a warm run after nothing changed;
- four copies side by side: `--scale-repo` copied four times into one folder, fsdplint cold on one
  copy and on the four, in pairs; the figure is the median ratio of the pairs.

The targets (printed met/MISSED at the end; they were set for a 2-core machine)
------------------------------------------------------------------------------
- a repository with no FSDP code: fsdplint cold at most ruff E9's time + 0.4 s, with no file parsed;
- each FSDP repository cold: at most 1.25 x its parse floor + 0.4 s;
- warm, nothing changed: at most 0.3 s, on every repository;
- one file edited in a 500-file repository: at most 0.5 s;
- peak memory at most 300 MB on every repository;
- four copies of a repository side by side: at most 4.2 x one copy's time.
A paired target is decided on the median over the rounds of each round's margin. The exit status is 0
whatever the figures: this is a benchmark, not a test.

`--corpus` measures the generated monorepo (benchmarks/corpus.py: `--lines` lines, about 2% of files
FSDP code) the same way, then single files and cold/warm against 0.5M, 1M and 2M generated lines.

What is measured is the fsdplint that `python -m fsdplint` imports in this interpreter (its location
and git commit are printed). TorchFix pins libcst<1.6, so it does not share fsdplint's environment: it
is found on PATH, given with --torchfix, or installed from PyPI into benchmarks/.torchfix-venv on first
use. ruff comes with the `bench` extra (`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import argparse
import codecs
import compileall
import hashlib
import io
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402


@dataclass(frozen=True)
class Repository:
    name: str  # the folder under --repos
    url: str
    fsdp: bool  # False: a repository with no FSDP code, where no file should be parsed


# The documented set. Clone each with `git clone --depth 1 URL DIR/NAME`.
REPOSITORIES = [
    Repository("sympy", "https://github.com/sympy/sympy", fsdp=False),
    Repository("accelerate", "https://github.com/huggingface/accelerate", fsdp=True),
    Repository("torchtitan", "https://github.com/pytorch/torchtitan", fsdp=True),
    Repository("axolotl", "https://github.com/axolotl-ai-cloud/axolotl", fsdp=True),
    Repository("pytorch-lightning", "https://github.com/Lightning-AI/pytorch-lightning", fsdp=True),
    Repository("DeepSpeed", "https://github.com/deepspeedai/DeepSpeed", fsdp=True),
]

# The targets, for a 2-core machine.
NO_FSDP_OVER_RUFF = 0.4  # s
COLD_FLOOR_FACTOR, COLD_OVER_FLOOR = 1.25, 0.4  # x, s
WARM_MAX = 0.3  # s
EDIT_MAX = 0.5  # s
EDIT_FILES = 500  # the edit target is for a repository of about this many files
PEAK_MAX_MB = 300
FOUR_COPIES_MAX = 4.2  # x one copy

VERBOSE = re.compile(r"(\d+) files: (\d+) read, (\d+) parsed, (\d+) served from the cache")
FSDP_TOKENS = ("fully_shard", "FullyShardedDataParallel")
SKIP_DIRS = {".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".nox", "build", "dist", "site-packages"}
MB = 1024 * 1024

# Installed through PYTHONPATH in the one run that records what fsdplint parses: every process of the
# run (pool workers too, forked or spawned) wraps libcst.parse_module and saves each source it is given.
RECORDER = '''
import os

_folder = os.environ.get("FSDPLINT_BENCH_PARSES")
if _folder:
    import hashlib
    import libcst

    _parse_module = libcst.parse_module

    def parse_module(source, *args, **kwargs):
        data = source if isinstance(source, bytes) else source.encode("utf-8", "surrogatepass")
        name = hashlib.sha256(data).hexdigest() + (".bytes" if isinstance(source, bytes) else ".str")
        path = os.path.join(_folder, name)
        if not os.path.exists(path):
            with open(path + ".%d" % os.getpid(), "wb") as file:
                file.write(data)
            os.replace(path + ".%d" % os.getpid(), path)
        with open(os.path.join(_folder, "events"), "a") as file:
            file.write(name + "\\n")
        return _parse_module(source, *args, **kwargs)

    libcst.parse_module = parse_module
'''


# running a command: wall time, the process tree's peak memory, a time limit

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
HAS_CHILDREN_FILES = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def tree_rss(root: int) -> int:
    """Sum of the resident set sizes of `root` and all its descendants, in bytes."""
    if HAS_CHILDREN_FILES:
        total, stack, seen = 0, [root], set()
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            try:
                with open(f"/proc/{pid}/statm", "rb") as file:
                    total += int(file.read().split()[1]) * PAGE
                for task in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{task}/children", "rb") as file:
                        stack += [int(child) for child in file.read().split()]
            except (OSError, ValueError, IndexError):  # it exited while being read
                continue
        return total
    if not os.path.isdir("/proc"):
        return 0
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as file:
                    fields = file.read().rsplit(b")", 1)[1].split()
                parents[int(entry)] = int(fields[1])
                rss[int(entry)] = int(fields[21]) * PAGE
            except (OSError, ValueError, IndexError):
                continue
    members, changed = {root}, True
    while changed:
        grown = members | {pid for pid, parent in parents.items() if parent in members}
        changed, members = grown != members, grown
    return sum(rss.get(pid, 0) for pid in members)


class TreePeak(threading.Thread):
    def __init__(self, pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak = pid, interval, 0
        self.done = threading.Event()

    def run(self) -> None:
        while True:
            self.peak = max(self.peak, tree_rss(self.pid))
            if self.done.wait(self.interval):
                return


@dataclass
class Run:
    seconds: float
    peak: int  # bytes, the whole tree
    stderr: str
    code: int | None
    timed_out: bool = False


POLL_SECONDS = 0.01


def run(command: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None, poll: bool = False) -> Run:
    """Run `command` in a session of its own, killed with its process group after `timeout` seconds.
    With `poll`, a thread samples the process tree's memory meanwhile; without, `peak` is only the largest
    single process's (timed runs are not polled, so that the sampling cannot slow them)."""
    with tempfile.TemporaryFile() as errors:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
                                   start_new_session=True, env=env)
        sampler = TreePeak(process.pid, POLL_SECONDS) if poll else None
        if sampler:
            sampler.start()
        lock, state = threading.Lock(), {"exited": False, "killed": False}

        def stop() -> None:
            with lock:
                if not state["exited"]:
                    state["killed"] = True
                    os.killpg(process.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, stop)
        timer.start()
        os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped: its group id stays ours
        seconds = time.perf_counter() - start
        with lock:
            state["exited"] = True
        timer.cancel()
        if sampler:
            sampler.done.set()
            sampler.join()
        try:
            os.killpg(process.pid, signal.SIGKILL)  # anything it left running in its group
        except (ProcessLookupError, PermissionError):
            pass
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        stderr = errors.read().decode(errors="replace")
    largest = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    return Run(seconds, max(sampler.peak if sampler else 0, largest), stderr, process.returncode, state["killed"])


# the tools

def tool(name: str) -> str | None:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def torchfix_command(given: str | None, install: bool) -> list[str] | None:
    if given:
        return [given]
    found = shutil.which("torchfix")
    if found:
        return [found]
    venv = HERE / ".torchfix-venv"
    if not (venv / "bin" / "torchfix").exists() and install:
        print("installing TorchFix into benchmarks/.torchfix-venv (it pins libcst<1.6) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "torchfix"], check=True)
    return [str(venv / "bin" / "torchfix")] if (venv / "bin" / "torchfix").exists() else None


def fsdplint_command(*args: str, path: str = ".") -> list[str]:
    return [sys.executable, "-m", "fsdplint", "check", "-q", "--exit-zero", "-v", *args, path]


def ruff_command(ruff: str) -> list[str]:
    return [ruff, "check", "--no-cache", "--isolated", "--select", "E9", "--exit-zero", "-q", "."]


def version_of(command: list[str]) -> str:
    try:
        return subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def fsdplint_origin() -> str:
    found = subprocess.run([sys.executable, "-c", "import fsdplint; print(fsdplint.__version__); print(fsdplint.__file__)"],
                           capture_output=True, text=True)
    if found.returncode:
        return "fsdplint cannot be imported: " + found.stderr.strip()[-300:]
    version, location = found.stdout.split()
    folder = Path(location).parent
    commit = git(folder, "rev-parse", "--short", "HEAD")
    dirty = git(folder, "status", "--porcelain", "--untracked-files=no")
    where = f", git {commit}{' with uncommitted changes' if dirty else ''}" if commit else ""
    return f"fsdplint {version} from {folder}{where}"


def source_stamp() -> list[tuple[str, int, int]]:
    """The .py files of the fsdplint being measured, with their mtimes and sizes: if they change during
    a run (someone editing the checkout), the figures mix versions, and its cache is invalidated."""
    import fsdplint
    import fsdplint.rules

    folders = {Path(fsdplint.__file__).parent, *map(Path, fsdplint.rules.__path__)}
    stamp = []
    for folder in sorted(folders):
        for path in sorted(folder.rglob("*.py")):
            try:
                stat = path.stat()
            except OSError:
                continue
            stamp.append((str(path), stat.st_mtime_ns, stat.st_size))
    return stamp


def git(folder: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def compile_bytecode() -> None:
    """Write fsdplint's bytecode as `pip install` does: an editable install run with
    PYTHONDONTWRITEBYTECODE=1 otherwise compiles every module in every process, pool workers included."""
    import fsdplint

    for folder in {Path(fsdplint.__file__).parent, *(Path(p) for p in getattr(__import__("fsdplint.rules").rules, "__path__", []))}:
        compileall.compile_dir(folder, quiet=1)


# the tree

def python_files(root: Path) -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        found += [Path(folder) / name for name in files if name.endswith(".py")]
    return sorted(found)


def copy_tree(source: Path, target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns(".git"))  # copy2 keeps the mtimes


# figures

@dataclass
class Counts:
    files: int
    read: int
    parsed: int
    cached: int

    def __str__(self) -> str:
        return f"{self.read} read, {self.parsed} parsed, {self.cached} from the cache"


def counts(stderr: str) -> Counts | None:
    match = VERBOSE.search(stderr)
    return Counts(*(int(group) for group in match.groups())) if match else None


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float]) -> str:
    if len(values) < 2:
        return ""
    return f"(min {min(values):.3f}, max {max(values):.3f})"


def schedule(times: list[float], cores: int) -> float:
    """The finish time of the longest-processing-time-first schedule of `times` on `cores` cores."""
    loads = [0.0] * max(cores, 1)
    for seconds in sorted(times, reverse=True):
        loads[loads.index(min(loads))] += seconds
    return max(loads)


def mb(value: int) -> str:
    return f"{value / MB:.0f} MB"


@dataclass
class Measured:
    name: str
    root: Path
    fsdp: bool | None  # None: not known beforehand (a folder given as an argument)
    files: int = 0
    lines: int = 0
    commit: str = ""
    cold: list[float] = field(default_factory=list)
    warm: list[float] = field(default_factory=list)
    ruff: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)  # over the cores, one per round
    floor_one_core: list[float] = field(default_factory=list)
    cold_counts: Counts | None = None
    warm_counts: Counts | None = None
    warm_parsed: int = 0  # the most files a warm run parsed (the polled one too): 0 unless the cache missed
    parsed_count: int | None = None  # files of the tree whose source the recording run saw parsed
    parsed_files: list[Path] = field(default_factory=list)  # those files
    parsed_other: int = 0  # other sources given to parse_module (a fix's code, say): not in the floor
    peak: dict[str, int] = field(default_factory=dict)  # mode -> bytes
    timed_out: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    torchfix: Run | None = None

    @property
    def is_fsdp(self) -> bool:
        if self.fsdp is not None:
            return self.fsdp
        return bool(self.cold_counts and self.cold_counts.parsed)


class Bench:
    def __init__(self, args: argparse.Namespace, ruff: str | None, torchfix: list[str] | None) -> None:
        self.args = args
        self.ruff = ruff
        self.torchfix = torchfix
        self.workdir: Path = args.workdir
        self.cores = args.cores
        self.stamp = source_stamp()
        self.changed: list[str] = []  # what was measured while fsdplint's source changed

    def check_source(self, what: str) -> None:
        stamp = source_stamp()
        if stamp != self.stamp:
            self.changed.append(what)
            print(f"   warning: fsdplint's source changed while {what} was measured: its figures mix versions", flush=True)
            self.stamp = stamp

    # one command of fsdplint

    def fsdplint(self, measured: Measured, mode: str, args: list[str], cwd: Path, poll: bool = False) -> Run:
        """One fsdplint run; a polled one (not timed) gives the peak memory of `mode`."""
        result = run(fsdplint_command(*args), cwd, self.args.timeout, poll=poll)
        if poll:
            measured.peak[mode] = max(measured.peak.get(mode, 0), result.peak)
        if mode == "warm" and counts(result.stderr):
            measured.warm_parsed = max(measured.warm_parsed, counts(result.stderr).parsed)
        if result.timed_out:
            measured.timed_out.add(mode)
        elif result.code not in (0, None):
            measured.errors.append(f"{mode}: fsdplint exited {result.code}: {result.stderr.strip()[-400:]}")
        elif counts(result.stderr) is None:
            measured.errors.append(f"{mode}: no file counts in fsdplint -v's output: {result.stderr.strip()[-400:]}")
        return result

    def record_parses(self, root: Path, folder: Path) -> tuple[Run, list[str]]:
        """An untimed cold run that saves every source fsdplint gives libcst.parse_module, in `folder`."""
        hook = folder / "hook"
        hook.mkdir(parents=True)
        (hook / "sitecustomize.py").write_text(RECORDER)
        saved = folder / "sources"
        saved.mkdir()
        env = dict(os.environ, FSDPLINT_BENCH_PARSES=str(saved),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])))
        result = run(fsdplint_command("--no-cache"), root, self.args.timeout, env=env)
        events = (saved / "events").read_text().split() if (saved / "events").exists() else []
        return result, events

    def parse_times(self, sources: list[Path]) -> list[float] | None:
        """Each saved source's LibCST parse time, in a fresh process."""
        if not sources:
            return []
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as listing:
            listing.write("\n".join(str(path) for path in sources))
        try:
            done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--time-parses", listing.name],
                                  capture_output=True, text=True, timeout=self.args.timeout)
        except subprocess.TimeoutExpired:
            return None
        finally:
            os.unlink(listing.name)
        return json.loads(done.stdout) if done.returncode == 0 else None

    # one repository

    def measure(self, measured: Measured) -> Measured:
        root, args = measured.root, self.args
        files = python_files(root)
        measured.files = len(files)
        measured.lines = sum(path.read_bytes().count(b"\n") for path in files)
        measured.commit = git(root, "rev-parse", "HEAD") or "not a git checkout"
        print(f"\n== {measured.name}: {root}\n   commit {measured.commit}; {measured.files:,} .py files, {measured.lines:,} lines; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        scratch = Path(tempfile.mkdtemp(prefix="fsdplint-bench-", dir=self.workdir))
        cache = scratch / "cache"
        try:
            # Untimed: fill the cache (a cold run too), then the runs that measure memory and the one
            # that records what is parsed; the rounds' runs are not slowed by any of that.
            fsdplint_ok = not self.fsdplint(measured, "cold", ["--cache-dir", str(cache)], root, poll=True).timed_out
            fsdplint_ok = fsdplint_ok and not self.fsdplint(measured, "cold", ["--no-cache"], root, poll=True).timed_out
            fsdplint_ok = fsdplint_ok and not self.fsdplint(measured, "warm", ["--cache-dir", str(cache)], root, poll=True).timed_out
            sources: list[Path] = []
            if fsdplint_ok:
                recorded, events = self.record_parses(root, scratch / "record")
                if recorded.timed_out:
                    measured.errors.append("the run recording the parsed files timed out")
                else:
                    by_digest = tree_digests(files)
                    names = sorted(set(events))
                    sources = [scratch / "record" / "sources" / name for name in names if name.split(".")[0] in by_digest]
                    measured.parsed_files = sorted({by_digest[name.split(".")[0]] for name in names if name.split(".")[0] in by_digest})
                    measured.parsed_count = len(sources)
                    measured.parsed_other = len(names) - len(sources)
            for index in range(args.rounds):
                steps = ["cold", "floor", "ruff", "warm"]
                for step in steps if index % 2 == 0 else steps[::-1]:
                    if step == "cold" and fsdplint_ok:
                        result = self.fsdplint(measured, "cold", ["--no-cache"], root)
                        if result.timed_out:
                            fsdplint_ok = False
                        else:
                            measured.cold.append(result.seconds)
                            measured.cold_counts = counts(result.stderr) or measured.cold_counts
                    elif step == "warm" and fsdplint_ok:
                        result = self.fsdplint(measured, "warm", ["--cache-dir", str(cache)], root)
                        if not result.timed_out:
                            measured.warm.append(result.seconds)
                            measured.warm_counts = counts(result.stderr) or measured.warm_counts
                    elif step == "ruff" and self.ruff:
                        result = run(ruff_command(self.ruff), root, args.timeout)
                        if not result.timed_out:
                            measured.ruff.append(result.seconds)
                    elif step == "floor" and fsdplint_ok and sources:
                        times = self.parse_times(sources)
                        if times is None:
                            measured.errors.append("the parse floor could not be measured")
                            sources = []
                        else:
                            measured.floor_one_core.append(sum(times))
                            measured.floor.append(schedule(times, self.cores))
            if fsdplint_ok and measured.parsed_count == 0:  # nothing parsed: the floor is zero in every round
                measured.floor = [0.0] * len(measured.cold)
                measured.floor_one_core = list(measured.floor)
            if self.torchfix and not args.no_torchfix:
                measured.torchfix = run([*self.torchfix, "--select", "ALL", "."], root, args.torchfix_timeout, poll=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        self.print_repository(measured)
        self.check_source(measured.name)
        return measured

    def print_repository(self, m: Measured) -> None:
        def line(label: str, values: list[float], extra: str = "") -> None:
            if values:
                print(f"   {label:14s} {median(values):8.3f} s  {spread(values):28s} {extra}".rstrip())

        if "cold" in m.timed_out and not m.cold:
            print(f"   fsdplint cold  timed out after {self.args.timeout:.0f} s   peak at least {mb(m.peak.get('cold', 0))} when stopped")
        line("fsdplint cold", m.cold, f"peak {mb(m.peak.get('cold', 0))}   {m.cold_counts or ''}")
        if "cold" in m.timed_out and m.cold:
            print(f"   fsdplint cold  one run timed out after {self.args.timeout:.0f} s")
        line("fsdplint warm", m.warm, f"peak {mb(m.peak.get('warm', 0))}   {m.warm_counts or ''}")
        if m.warm_parsed:
            print(f"   note: a warm run parsed {m.warm_parsed} files: the cache did not serve them (fsdplint's source changed?); "
                  f"its time or memory is not a warm one")
        if m.parsed_count == 0:
            print(f"   {'parse floor':14s} {0:8.3f} s  {'':28s} no file parsed")
        elif m.floor:
            print(f"   {'parse floor':14s} {median(m.floor):8.3f} s  {spread(m.floor):28s} LibCST parse of the {m.parsed_count} parsed files, "
                  f"{median(m.floor_one_core):.3f} s on one core, scheduled on {self.cores}")
        if m.cold_counts and m.parsed_count is not None and m.parsed_count != m.cold_counts.parsed:
            print(f"   note: the recording run saw {m.parsed_count} of the tree's files parsed, -v says {m.cold_counts.parsed}")
        if m.parsed_other:
            print(f"   note: {m.parsed_other} other sources were given to libcst.parse_module (a fix's code, say): not in the floor")
        line("ruff E9", m.ruff)
        if m.torchfix is not None:
            if m.torchfix.timed_out:
                print(f"   {'TorchFix':14s} timed out after {self.args.torchfix_timeout:.0f} s (one run; peak at least {mb(m.torchfix.peak)})")
            else:
                print(f"   {'TorchFix':14s} {m.torchfix.seconds:8.3f} s  {'(one run)':28s} peak {mb(m.torchfix.peak)}")
        ratios = []
        if m.cold and m.floor and median(m.floor):
            ratios.append(f"cold/floor {median(m.cold) / median(m.floor):.2f}x")
        if m.cold and m.ruff:
            ratios.append(f"cold/ruff {median(m.cold) / median(m.ruff):.1f}x")
        if m.cold and m.torchfix and not m.torchfix.timed_out:
            ratios.append(f"TorchFix/cold {m.torchfix.seconds / median(m.cold):.1f}x")
        if ratios:
            print("   " + ", ".join(ratios))
        for error in m.errors:
            print(f"   error: {error}")
        sys.stdout.flush()

    # one file edited

    def edit(self, source: Measured) -> dict:
        args = self.args
        copy = self.workdir / "edit" / source.root.name
        print(f"\n== one file edited: a copy of {source.name} ({source.files} .py files)", flush=True)
        copy_tree(source.root, copy)
        cache = self.workdir / "edit" / "cache"
        shutil.rmtree(cache, ignore_errors=True)
        measured = Measured(f"{source.name}, one file edited", copy, True)
        try:
            fill = self.fsdplint(measured, "fill", ["--cache-dir", str(cache)], copy)
            if fill.timed_out:
                print(f"   filling the cache timed out after {args.timeout:.0f} s")
                return {"repository": source.name, "skipped": f"filling the cache timed out after {args.timeout:.0f} s"}
            target = edit_target(copy, source)
            if target is None:
                print("   no FSDP file that fsdplint parses: nothing to edit")
                return {"repository": source.name, "skipped": "no FSDP file that fsdplint parses"}
            original = target.read_bytes()
            edited: list[float] = []
            unchanged: list[float] = []
            parsed: list[int] = []
            for index in range(args.rounds):
                for step in ("edit", "same") if index % 2 == 0 else ("same", "edit"):
                    if step == "edit":
                        target.write_bytes(original + f"\n_fsdplint_bench_edit = {index}\n".encode())
                    result = self.fsdplint(measured, step, ["--cache-dir", str(cache)], copy)
                    if result.timed_out:
                        print(f"   timed out after {args.timeout:.0f} s")
                        return {"repository": source.name, "skipped": f"timed out after {args.timeout:.0f} s"}
                    (edited if step == "edit" else unchanged).append(result.seconds)
                    if step == "edit":
                        parsed.append(counts(result.stderr).parsed if counts(result.stderr) else -1)
            print(f"   edited {target.relative_to(copy)} ({len(original):,} bytes): a statement added at its end, a new one each round")
            print(f"   {'edited':14s} {median(edited):8.3f} s  {spread(edited):28s} files parsed: {', '.join(map(str, sorted(set(parsed))))}")
            print(f"   {'unchanged':14s} {median(unchanged):8.3f} s  {spread(unchanged)}".rstrip())
            for error in measured.errors:
                print(f"   error: {error}")
            return {"repository": source.name, "files": source.files, "edited": edited, "parsed": parsed}
        finally:
            shutil.rmtree(self.workdir / "edit", ignore_errors=True)
            self.check_source("one file edited")

    # four copies side by side

    def four_copies(self, source: Measured) -> dict:
        args = self.args
        folder = self.workdir / "copies"
        print(f"\n== four copies of {source.name} side by side", flush=True)
        shutil.rmtree(folder, ignore_errors=True)
        for number in range(1, 5):
            copy_tree(source.root, folder / f"copy{number}")
        one: list[float] = []
        four: list[float] = []
        read: dict[str, int] = {}
        try:
            for index in range(args.rounds):
                for step in ("one", "four") if index % 2 == 0 else ("four", "one"):
                    path = "copy1" if step == "one" else "."
                    result = run(fsdplint_command("--no-cache", path=path), folder, args.timeout * (1 if step == "one" else 4))
                    if result.timed_out:
                        print(f"   {step} cop{'y' if step == 'one' else 'ies'}: timed out")
                        return {"repository": source.name, "skipped": f"{step} cop{'y' if step == 'one' else 'ies'} timed out"}
                    (one if step == "one" else four).append(result.seconds)
                    found = counts(result.stderr)
                    read[step] = found.read if found else -1
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            self.check_source("four copies")
        ratios = [b / a for a, b in zip(one, four)]
        print(f"   {'one copy':14s} {median(one):8.3f} s  {spread(one):28s} {read['one']} files read")
        print(f"   {'four copies':14s} {median(four):8.3f} s  {spread(four):28s} {read['four']} files read")
        print(f"   four/one       {median(ratios):8.2f} x  (median of the {len(ratios)} pairs' ratios)")
        return {"repository": source.name, "ratios": ratios}

    # the targets

    def targets(self, repositories: list[Measured], edit: dict, scale: dict, missing: list[str] = ()) -> None:
        print(f"\n== targets ({self.cores} cores; a paired target on the median of each round's margin)")
        if missing:
            print(f"   not measured (missing from --repos): {', '.join(missing)}")
        if self.changed:
            print(f"   warning: fsdplint's source changed during the run ({', '.join(self.changed)}): measure again on a still checkout")

        def verdict(ok: bool) -> str:
            return "met" if ok else "MISSED"

        def say(label: str, ok: bool | None, detail: str) -> None:
            print(f"   {('not measured' if ok is None else verdict(ok)):12s} {label}: {detail}")

        for m in repositories:
            timed_out = "cold" in m.timed_out and not m.cold
            if not m.is_fsdp:
                label = f"{m.name} (no FSDP code) cold <= ruff E9 + {NO_FSDP_OVER_RUFF} s, no file parsed"
                if timed_out:
                    say(label, False, f"timed out after {self.args.timeout:.0f} s")
                elif m.cold and m.ruff:
                    margin = median([c - r - NO_FSDP_OVER_RUFF for c, r in zip(m.cold, m.ruff)])
                    parsed = m.cold_counts.parsed if m.cold_counts else None
                    say(label, margin <= 0 and parsed == 0,
                        f"{median(m.cold):.3f} s against {median(m.ruff):.3f} + {NO_FSDP_OVER_RUFF} s (margin {margin:+.3f} s), {parsed} parsed")
                else:
                    say(label, None, "no timing")
            else:
                label = f"{m.name} cold <= {COLD_FLOOR_FACTOR} x floor + {COLD_OVER_FLOOR} s"
                if timed_out:
                    say(label, False, f"timed out after {self.args.timeout:.0f} s")
                elif m.cold and m.floor:
                    margin = median([c - COLD_FLOOR_FACTOR * f - COLD_OVER_FLOOR for c, f in zip(m.cold, m.floor)])
                    say(label, margin <= 0, f"{median(m.cold):.3f} s against {COLD_FLOOR_FACTOR} x {median(m.floor):.3f} + {COLD_OVER_FLOOR} s "
                        f"= {COLD_FLOOR_FACTOR * median(m.floor) + COLD_OVER_FLOOR:.3f} s (margin {margin:+.3f} s)")
                else:
                    say(label, None, "no timing")
        for m in repositories:
            label = f"{m.name} warm, nothing changed <= {WARM_MAX} s"
            if m.warm:
                say(label, median(m.warm) <= WARM_MAX, f"{median(m.warm):.3f} s")
            else:
                say(label, False if "cold" in m.timed_out else None, "timed out" if "cold" in m.timed_out else "no timing")
        if "skipped" in edit:
            say(f"one file edited in {edit.get('repository', f'a {EDIT_FILES}-file repository')} <= {EDIT_MAX} s", None, edit["skipped"])
        else:
            label = f"one file edited in {edit['repository']} ({edit['files']} files) <= {EDIT_MAX} s"
            say(label, median(edit["edited"]) <= EDIT_MAX, f"{median(edit['edited']):.3f} s")
        for m in repositories:
            peak = max(m.peak.values(), default=0)
            label = f"{m.name} peak memory <= {PEAK_MAX_MB} MB"
            if peak and m.timed_out and peak <= PEAK_MAX_MB * MB:
                say(label, None, f"at least {mb(peak)} when a run was stopped: not known")
            elif peak:
                stopped = " (at least: a run was stopped)" if m.timed_out else ""
                say(label, peak <= PEAK_MAX_MB * MB, f"{mb(peak)}{stopped}, the process tree's RSS sum")
            else:
                say(label, None, "no run")
        if "skipped" in scale:
            say(f"four copies of {scale.get('repository', 'a repository')} <= {FOUR_COPIES_MAX} x one copy", None, scale["skipped"])
        else:
            ratio = median(scale["ratios"])
            say(f"four copies of {scale['repository']} <= {FOUR_COPIES_MAX} x one copy", ratio <= FOUR_COPIES_MAX, f"{ratio:.2f} x")


def source_digests(data: bytes) -> set[str]:
    """Digests of the text fsdplint would hand LibCST for a file holding `data` (decoded as Python decodes
    source, without a BOM), and of the bytes themselves."""
    digests = {hashlib.sha256(data).hexdigest()}
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.removeprefix(codecs.BOM_UTF8).decode("utf-8" if encoding == "utf-8-sig" else encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError):
        return digests
    for variant in (text, text.replace("\r\n", "\n")):
        digests.add(hashlib.sha256(variant.encode("utf-8", "surrogatepass")).hexdigest())
    return digests


def tree_digests(files: list[Path]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in files:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        for digest in source_digests(data):
            found.setdefault(digest, path)
    return found


def edit_target(copy: Path, source: Measured) -> Path | None:
    """The FSDP file to edit: among the files fsdplint parsed that hold an FSDP token, the median by size."""
    candidates = []
    for path in source.parsed_files:
        data = (copy / path.relative_to(source.root)).read_bytes()
        if any(token.encode() in data for token in FSDP_TOKENS):
            candidates.append((len(data), str(path)))
    if not candidates:
        return None
    candidates.sort()
    return copy / Path(candidates[(len(candidates) - 1) // 2][1]).relative_to(source.root)


def time_parses(listing: Path) -> None:
    """--time-parses: each listed source's LibCST parse time, as JSON on stdout."""
    import libcst

    libcst.parse_module("import os\n\n\ndef f(x):\n    return [y for y in x if y]\n")  # warm up
    times = []
    for name in listing.read_text().split("\n"):
        path = Path(name)
        source: str | bytes = path.read_bytes() if path.suffix == ".bytes" else path.read_bytes().decode("utf-8", "surrogatepass")
        start = time.perf_counter()
        libcst.parse_module(source)
        times.append(time.perf_counter() - start)
    print(json.dumps(times))


# the generated corpus (--corpus)

def single_files(rounds: int, timeout: float) -> None:
    print("\n== single files", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        plain = corpus.plain_module(corpus.random.Random(1), 1000, [])
        (root / "plain.py").write_text(plain)
        rng = corpus.random.Random(2)
        fsdp = "import torch\nfrom torch.distributed.fsdp import fully_shard\n\n\n" + "\n".join(corpus._padding(rng, 90)) + (
            "\n\ndef main(model, x):\n    for block in model.layers:\n        fully_shard(block)\n    fully_shard(model)\n"
            "    optimizer = torch.optim.AdamW(model.parameters())\n    return model.forward(x)\n")
        (root / "fsdp.py").write_text(fsdp)
        past = time.time() - 60
        for path in root.iterdir():
            os.utime(path, (past, past))
        cache = root / "cache"
        cases = [
            (f"no FSDP code ({plain.count(chr(10))} lines), --no-cache", ["--no-cache"], "plain.py"),
            (f"FSDP file ({fsdp.count(chr(10))} lines), --no-cache", ["--no-cache"], "fsdp.py"),
            ("FSDP file, unchanged since the cache saw it", ["--cache-dir", str(cache)], "fsdp.py"),
        ]
        run(fsdplint_command("--cache-dir", str(cache), path="fsdp.py"), root, timeout)
        for label, args, path in cases:
            samples = [run(fsdplint_command(*args, path=path), root, timeout) for _ in range(rounds)]
            print(f"{label:55s} {median([s.seconds for s in samples]):.3f} s   peak {mb(max(s.peak for s in samples))}")
        imports = subprocess.run([sys.executable, "-X", "importtime", "-m", "fsdplint", "--no-cache", "plain.py"], cwd=root, capture_output=True, text=True).stderr
        print(f"libcst imported for a file with no FSDP code: {'yes' if ' libcst' in imports else 'no'}")


def scaling(bench: Bench, rounds: int) -> None:
    print("\n== scaling: cold and warm against generated lines", flush=True)
    for lines in (500_000, 1_000_000, 2_000_000):
        root = generated(bench.workdir, lines)
        cache = Path(tempfile.mkdtemp(prefix="fsdplint-bench-cache-", dir=bench.workdir))
        measured = Measured(f"{lines:,} lines", root, True)
        try:
            if bench.fsdplint(measured, "fill", ["--cache-dir", str(cache)], root).timed_out:
                print(f"{lines:>9,} lines   timed out")
                continue
            for _ in range(rounds):
                for mode, args in (("cold", ["--no-cache"]), ("warm", ["--cache-dir", str(cache)])):
                    result = bench.fsdplint(measured, mode, args, root)
                    if not result.timed_out:
                        (measured.cold if mode == "cold" else measured.warm).append(result.seconds)
                        if mode == "cold":
                            measured.cold_counts = counts(result.stderr)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        cold = f"{median(measured.cold):.3f} s" if measured.cold else "timed out"
        warm = f"{median(measured.warm):.3f} s" if measured.warm else "timed out"
        print(f"{lines:>9,} lines   cold {cold}   warm {warm}   ({measured.cold_counts})", flush=True)


def generated(workdir: Path, lines: int) -> Path:
    root = workdir / f"corpus-{lines}"
    if not (root / ".complete").exists():
        shutil.rmtree(root, ignore_errors=True)
        stats = corpus.generate(root, lines)
        past = time.time() - 60  # older than the cache's racy-clean window, as a checked-out tree is
        for path in root.rglob("*.py"):
            os.utime(path, (past, past))
        (root / ".complete").write_text(f"{stats}\n")
    return root


# the repositories

def fetch(folder: Path, repository: Repository) -> bool:
    print(f"cloning {repository.url} into {folder / repository.name} ...", flush=True)
    done = subprocess.run(["git", "clone", "-q", "--depth", "1", repository.url, str(folder / repository.name)])
    return done.returncode == 0


def chosen_repositories(args: argparse.Namespace) -> tuple[list[Measured], list[str]]:
    """The repositories to measure, and the names of those of the set that are missing."""
    names = [name.strip() for name in args.only.split(",")] if args.only else [r.name for r in REPOSITORIES]
    known = {r.name.lower(): r for r in REPOSITORIES}
    unknown = [name for name in names if name.lower() not in known]
    if unknown:
        sys.exit(f"bench.py: not in the documented set: {', '.join(unknown)} (known: {', '.join(r.name for r in REPOSITORIES)})")
    chosen: list[Measured] = []
    missing: list[str] = []
    for name in names:
        repository = known[name.lower()]
        folder = args.repos / repository.name
        if not folder.is_dir() and args.fetch:
            args.repos.mkdir(parents=True, exist_ok=True)
            fetch(args.repos, repository)
        if not folder.is_dir():
            print(f"missing {folder}: get it with `git clone --depth 1 {repository.url} {folder}` (or pass --fetch); skipped")
            missing.append(repository.name)
            continue
        chosen.append(Measured(repository.name, folder.resolve(), repository.fsdp))
    for folder in args.dirs:
        chosen.append(Measured(folder.resolve().name, folder.resolve(), None))
    return chosen, missing


def nearest(measured: list[Measured], name: str | None, files: int) -> Measured | dict:
    """The repository named, else the FSDP one whose file count is nearest `files`; or why there is none."""
    if name:
        found = [m for m in measured if m.name.lower() == name.lower()]
        return found[0] if found else {"repository": name, "skipped": "not measured in this run"}
    candidates = [m for m in measured if m.is_fsdp and "cold" not in m.timed_out]
    return min(candidates, key=lambda m: abs(m.files - files), default={"skipped": "no FSDP repository measured without timing out"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="*", type=Path, help="Also benchmark these folders.")
    parser.add_argument("--repos", type=Path, default=Path.home() / ".cache" / "fsdplint-bench" / "repos",
                        help="The folder holding one checkout per repository of the set, named as in the table (default: %(default)s).")
    parser.add_argument("--only", help="Comma-separated names from the set to measure (default: all of them).")
    parser.add_argument("--fetch", action="store_true", help="git clone --depth 1 the repositories missing from --repos.")
    parser.add_argument("--rounds", type=int, default=5, help="Alternating rounds; figures are their medians (default: %(default)s).")
    parser.add_argument("--timeout", type=float, default=300, help="Time limit of one fsdplint run, in seconds (default: %(default)s).")
    parser.add_argument("--edit-repo", help="The repository to edit one file of (default: the FSDP one whose file count is nearest 500).")
    parser.add_argument("--scale-repo", help="The repository to copy four times (default: accelerate if measured, else the edit repository).")
    parser.add_argument("--skip-edit", action="store_true", help="Do not run the one-file-edited case.")
    parser.add_argument("--skip-copies", action="store_true", help="Do not run the four-copies case.")
    parser.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
                        help="Cores the parse floor is scheduled on (default: those this process may run on, %(default)s).")
    parser.add_argument("--poll-ms", type=float, default=10, help="How often the process tree's memory is sampled (default: %(default)s ms).")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "fsdplint-bench",
                        help="Scratch folder: caches, copies, the generated corpus (default: %(default)s).")
    parser.add_argument("--torchfix", help="TorchFix executable (default: PATH, else benchmarks/.torchfix-venv).")
    parser.add_argument("--no-install", action="store_true", help="Never install TorchFix.")
    parser.add_argument("--no-torchfix", action="store_true", help="Do not run TorchFix.")
    parser.add_argument("--torchfix-timeout", type=float, default=300, help="Time limit of one TorchFix run (default: %(default)s s).")
    parser.add_argument("--corpus", action="store_true", help="Measure the generated monorepo instead of the repositories.")
    parser.add_argument("--lines", type=int, default=1_000_000, help="With --corpus: lines of the generated monorepo.")
    parser.add_argument("--skip-scaling", action="store_true", help="With --corpus: skip the 0.5M/1M/2M-line scaling.")
    parser.add_argument("--time-parses", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.time_parses:
        time_parses(args.time_parses)
        return
    global POLL_SECONDS
    POLL_SECONDS = args.poll_ms / 1000
    args.workdir.mkdir(parents=True, exist_ok=True)
    chosen, missing = ([], []) if args.corpus else chosen_repositories(args)
    compile_bytecode()
    ruff = tool("ruff")
    torchfix = None if args.no_torchfix else torchfix_command(args.torchfix, not args.no_install)
    print(f"{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}; Python {sys.version.split()[0]}; {fsdplint_origin()}")
    print(f"ruff: {version_of([ruff]) if ruff else 'not found'}; TorchFix: {version_of(torchfix) + ' (' + torchfix[0] + ')' if torchfix else 'not run'}; "
          f"memory: {'the process tree' if HAS_CHILDREN_FILES or os.path.isdir('/proc') else 'the largest process only (no /proc)'}, "
          f"sampled every {args.poll_ms:g} ms", flush=True)
    bench = Bench(args, ruff, torchfix)
    if args.corpus:
        measured = [bench.measure(Measured("generated monorepo", generated(args.workdir, args.lines), True))]
        measured += [bench.measure(Measured(folder.resolve().name, folder.resolve(), None)) for folder in args.dirs]
        skipped = {"skipped": "not run with --corpus"}
        bench.targets(measured, skipped, skipped)
        single_files(args.rounds, args.timeout)
        if not args.skip_scaling:
            scaling(bench, args.rounds)
        return
    measured = [bench.measure(m) for m in chosen]
    edit = {"skipped": "--skip-edit"}
    if not args.skip_edit:
        target = nearest(measured, args.edit_repo, EDIT_FILES)
        edit = bench.edit(target) if isinstance(target, Measured) else target
    scale = {"skipped": "--skip-copies"}
    if not args.skip_copies:
        default = "accelerate" if any(m.name == "accelerate" for m in measured) else None
        target = nearest(measured, args.scale_repo or default, EDIT_FILES)
        scale = bench.four_copies(target) if isinstance(target, Measured) else target
    bench.targets(measured, edit, scale, missing)


if __name__ == "__main__":
    main()
