"""Benchmark fsdplint against ruff and TorchFix: `python benchmarks/bench.py [DIR ...]`.

On a generated monorepo (benchmarks/corpus.py: 1M lines, about 2% of files FSDP code) and on each DIR
given, in alternating rounds: fsdplint cold (`--no-cache`), fsdplint warm (cache filled, nothing
changed) and `ruff check --no-cache --select E9`; then TorchFix on a slice of the tree, as lines per
second. Prints medians, ratios, peak memory, the files read / parsed / served from the cache, and the
floor: the time LibCST takes only to parse the files fsdplint parsed, divided by the cores it used.
Then cold and warm times for 0.5M, 1M and 2M generated lines, and the single-file cases.

TorchFix pins libcst<1.6, so it does not share fsdplint's environment: it is found on PATH, given with
--torchfix, or installed from PyPI into benchmarks/.torchfix-venv on first use. ruff comes with the
`bench` extra (`pip install -e '.[bench]'`). This is a benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402

VERBOSE = re.compile(r"(\d+) files: (\d+) read, (\d+) parsed, (\d+) served from the cache")


def run(command: list[str], cwd: Path) -> tuple[float, int, str]:
    """Wall time, peak RSS in MB of the process or any child it waited for, and stderr."""
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = process.stderr.read()
    _, _, usage = os.wait4(process.pid, 0)
    process.returncode = 0
    return time.perf_counter() - start, usage.ru_maxrss // 1024, stderr


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


def python_files(root: Path) -> list[Path]:
    from fsdplint.discovery import discover

    return [Path(c.path) for c in discover([root], [], root, force_exclude=False)]


def count_lines(files: list[Path]) -> int:
    return sum(path.read_bytes().count(b"\n") for path in files)


def floor(root: Path) -> tuple[float, int, int]:
    """(seconds LibCST takes to parse the files fsdplint parses / the cores used, those files, cores)."""
    import libcst

    from fsdplint.config import Settings
    from fsdplint.engine import POOL_MIN_BYTES, Engine
    from fsdplint.registry import all_rules

    ruleset = all_rules()
    engine = Engine(ruleset, ruleset.rules, Settings())
    cwd = os.getcwd()
    os.chdir(root)
    try:
        from fsdplint.discovery import discover

        sources, _ = engine.read(discover([Path(".")], [], root, force_exclude=False))
        plan = engine._plan(list(sources), lambda d: sources[d].text, set(), {d: s.path for d, s in sources.items()})
    finally:
        os.chdir(cwd)
    parsed = plan.parsed
    size = sum(len(sources[d].text) for d in parsed)
    cores = min(engine.jobs, sum(unit.parse for unit in plan.units)) if size >= POOL_MIN_BYTES else 1
    start = time.perf_counter()
    for display in parsed:
        libcst.parse_module(sources[display].text)
    return (time.perf_counter() - start) / max(cores, 1), len(parsed), cores


def fsdplint_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "fsdplint", "check", "-q", "--exit-zero", "-v", *args, "."]


def measure(root: Path, rounds: int, ruff: str | None) -> dict:
    cache = Path(tempfile.mkdtemp(prefix="fsdplint-bench-cache-"))
    run(fsdplint_command("--cache-dir", str(cache)), root)  # fill the cache
    times: dict[str, list[float]] = {"cold": [], "warm": [], "ruff": []}
    memory: dict[str, int] = {"cold": 0, "warm": 0}
    counts: dict[str, str] = {}
    for _ in range(rounds):
        for name, command in (("cold", fsdplint_command("--no-cache")), ("warm", fsdplint_command("--cache-dir", str(cache)))):
            seconds, rss, stderr = run(command, root)
            times[name].append(seconds)
            memory[name] = max(memory[name], rss)
            match = VERBOSE.search(stderr)
            counts[name] = f"{match.group(2)} read, {match.group(3)} parsed, {match.group(4)} from cache" if match else stderr.strip()[-200:]
        if ruff:
            times["ruff"].append(run([ruff, "check", "--no-cache", "--select", "E9", "--exit-zero", "-q", "."], root)[0])
    shutil.rmtree(cache, ignore_errors=True)
    return {"median": {name: statistics.median(values) for name, values in times.items() if values}, "memory": memory, "counts": counts}


def torchfix_rate(root: Path, command: list[str] | None, slice_lines: int) -> tuple[float, int] | None:
    """TorchFix's lines per second on the first files of the tree, up to `slice_lines` lines."""
    if command is None:
        return None
    chosen, lines = [], 0
    for path in sorted(python_files(root)):
        if lines >= slice_lines:
            break
        chosen.append(path)
        lines += path.read_bytes().count(b"\n")
    with tempfile.TemporaryDirectory() as folder:
        for index, path in enumerate(chosen):
            shutil.copy(path, Path(folder) / f"f{index}.py")
        seconds, _, _ = run([*command, "--select", "ALL", "."], Path(folder))
    return lines / seconds, lines


def report(title: str, root: Path, rounds: int, ruff: str | None, torchfix: list[str] | None, slice_lines: int) -> None:
    files = python_files(root)
    lines = count_lines(files)
    print(f"\n== {title}: {root} ({len(files)} files, {lines:,} lines)", flush=True)
    result = measure(root, rounds, ruff)
    median = result["median"]
    floor_seconds, parsed, cores = floor(root)
    print(f"fsdplint cold  {median['cold']:7.3f} s   peak {result['memory']['cold']} MB   {result['counts']['cold']}")
    print(f"fsdplint warm  {median['warm']:7.3f} s   peak {result['memory']['warm']} MB   {result['counts']['warm']}")
    if "ruff" in median:
        print(f"ruff E9        {median['ruff']:7.3f} s   cold/ruff {median['cold'] / median['ruff']:.1f}x   warm/ruff {median['warm'] / median['ruff']:.1f}x")
    target = 1.25 * floor_seconds + 0.4
    print(f"floor          {floor_seconds:7.3f} s   (LibCST parse of the {parsed} parsed files / {cores} core(s)); "
          f"cold target 1.25 x floor + 0.4 s = {target:.3f} s: {'met' if median['cold'] <= target else 'MISSED'}")
    rate = torchfix_rate(root, torchfix, slice_lines)
    ours = lines / median["cold"]
    if rate:
        print(f"TorchFix       {rate[0]:9,.0f} lines/s on a {rate[1]:,}-line slice; fsdplint cold {ours:,.0f} lines/s = {ours / rate[0]:,.0f}x TorchFix "
              f"(TorchFix on the whole tree: ~{lines / rate[0]:,.0f} s)")
    else:
        print(f"TorchFix       not available; fsdplint cold {ours:,.0f} lines/s")


def single_files(rounds: int) -> None:
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
            (f"no FSDP code ({plain.count(chr(10))} lines), --no-cache", ["--no-cache", "plain.py"]),
            (f"FSDP file ({fsdp.count(chr(10))} lines), --no-cache", ["--no-cache", "fsdp.py"]),
            ("FSDP file, unchanged since the cache saw it", ["--cache-dir", str(cache), "fsdp.py"]),
        ]
        run([*fsdplint_command("--cache-dir", str(cache))[:-1], "fsdp.py"], root)
        for label, args in cases:
            samples = [run([*fsdplint_command()[:-1], *args], root) for _ in range(rounds)]
            print(f"{label:55s} {statistics.median(s[0] for s in samples):.3f} s   peak {max(s[1] for s in samples)} MB")
        imports = subprocess.run([sys.executable, "-X", "importtime", "-m", "fsdplint", "--no-cache", "plain.py"], cwd=root, capture_output=True, text=True).stderr
        print(f"libcst imported for a file with no FSDP code: {'yes' if ' libcst' in imports else 'no'}")


def scaling(workdir: Path, rounds: int) -> None:
    print("\n== scaling: cold and warm against generated lines", flush=True)
    for lines in (500_000, 1_000_000, 2_000_000):
        root = generated(workdir, lines)
        result = measure(root, rounds, None)
        print(f"{lines:>9,} lines   cold {result['median']['cold']:.3f} s   warm {result['median']['warm']:.3f} s   ({result['counts']['cold']})", flush=True)


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


def compile_bytecode() -> None:
    """Write fsdplint's bytecode as `pip install` does: an editable install run with
    PYTHONDONTWRITEBYTECODE=1 otherwise compiles every module in every process, pool workers included."""
    import fsdplint
    import fsdplint.rules

    for package in (fsdplint, fsdplint.rules):
        compileall.compile_dir(Path(package.__file__).parent, maxlevels=0, quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="*", type=Path, help="Also benchmark these directories.")
    parser.add_argument("--lines", type=int, default=1_000_000, help="Lines of the generated monorepo.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "fsdplint-bench")
    parser.add_argument("--torchfix", help="TorchFix executable (default: PATH, else benchmarks/.torchfix-venv).")
    parser.add_argument("--no-install", action="store_true", help="Never install TorchFix.")
    parser.add_argument("--torchfix-lines", type=int, default=20_000, help="Lines in the slice TorchFix runs on.")
    parser.add_argument("--skip-scaling", action="store_true")
    args = parser.parse_args()
    compile_bytecode()
    ruff = tool("ruff")
    torchfix = torchfix_command(args.torchfix, not args.no_install)
    print(f"{os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.1f}; ruff: {ruff or 'not found'}; TorchFix: {torchfix[0] if torchfix else 'not found'}")
    report("generated monorepo", generated(args.workdir, args.lines), args.rounds, ruff, torchfix, args.torchfix_lines)
    for folder in args.dirs:
        report("directory", folder.resolve(), args.rounds, ruff, torchfix, args.torchfix_lines)
    single_files(args.rounds)
    if not args.skip_scaling:
        scaling(args.workdir, args.rounds)


if __name__ == "__main__":
    main()
