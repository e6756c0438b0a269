"""A deterministic generated monorepo: mostly plain Python, with about 2% of its files using FSDP.

The FSDP code comes in small projects, each a package with the shapes real training code has and
that a prefilter can get wrong: a trainer with no FSDP token that calls the parallelize function of
another file (directly, under an alias, as a module attribute, or through a helper of a third file),
an optimizer built by a helper in a file with no FSDP token, standalone scripts, a `# noqa`, and
torch.distributed code that never shards. Some projects reuse the same function names so that name
resolution across projects matters. Every file is valid Python.

    python benchmarks/corpus.py OUT --lines 1000000
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from pathlib import Path

WORDS = (
    "alpha beta gamma delta record batch token stream buffer cache index table column vector "
    "matrix layer block frame packet queue worker task job stage metric score loss grade route "
    "config option value field entry item node edge graph tree shard chunk page window signal "
    "event store reader writer parser loader sampler scheduler planner encoder decoder"
).split()

FSDP_FILES_PER_PROJECT = 6  # parallelize, optim, setup, trainer, script, dist helpers (+ __init__)


@dataclass
class CorpusStats:
    files: int = 0
    lines: int = 0
    fsdp_files: int = 0  # files of the FSDP projects (their __init__.py aside)


def _name(rng: random.Random, parts: int = 2) -> str:
    return "_".join(rng.choice(WORDS) for _ in range(parts))


def _class_name(rng: random.Random) -> str:
    return "".join(word.capitalize() for word in _name(rng).split("_")) + str(rng.randrange(100))


def plain_function(rng: random.Random, name: str) -> list[str]:
    a, b, c = _name(rng) + "_items", _name(rng) + "_skip", _name(rng) + "_rows"
    lines = [f"def {name}({a}, {b}=None, *, limit={rng.randrange(2, 64)}):", f'    """Compute the {a.replace("_", " ")} of each {b.replace("_", " ")}."""']
    lines += [f"    {c} = []", f"    for index, item in enumerate({a}):", "        if index >= limit:", "            break"]
    lines += [f"        if {b} is not None and item in {b}:", "            continue", f"        {c}.append((index, str(item).upper(), len(str(item)) * {rng.randrange(1, 9)}))"]
    lines += [f"    totals = {{key: value for key, _, value in {c} if value % {rng.randrange(2, 7)}}}", "    return sorted(totals.items(), key=lambda pair: (-pair[1], pair[0]))", ""]
    return lines


def plain_class(rng: random.Random) -> list[str]:
    name = _class_name(rng)
    field_a, field_b = _name(rng, 1), _name(rng, 1) + "_count"
    lines = [f"class {name}:", f'    """A {field_a} holder with a running {field_b}."""', "",
             f"    def __init__(self, {field_a}, {field_b}=0):", f"        self.{field_a} = {field_a}", f"        self.{field_b} = {field_b}", "        self.history = []", ""]
    for _ in range(rng.randrange(2, 5)):
        method = _name(rng)
        lines += [f"    def {method}(self, value):", "        self.history.append(value)", f"        self.{field_b} += 1",
                  f"        if len(self.history) > {rng.randrange(8, 128)}:", "            self.history.pop(0)",
                  f"        return self.{field_a}, sum(hash(x) % 7 for x in self.history)", ""]
    lines += ["    def __repr__(self):", f'        return f"{name}({{self.{field_a}!r}}, {{self.{field_b}}})"', ""]
    return lines


def plain_module(rng: random.Random, target_lines: int, siblings: list[str]) -> str:
    lines = ['"""Generated module: plain Python, no sharding here."""', "", "import json", "import os", "from collections import defaultdict", ""]
    if siblings:
        sibling = rng.choice(siblings)
        lines += [f"from . import {sibling}", ""]
    lines += [f"DEFAULT_{_name(rng).upper()} = {rng.randrange(1000)}", ""]
    while len(lines) < target_lines:
        lines += plain_class(rng) if rng.random() < 0.4 else plain_function(rng, _name(rng, 3))
        lines.append("")
    lines += ["", "def main():", "    print(json.dumps(sorted(os.environ)[:3]))", "", "", 'if __name__ == "__main__":', "    main()"]
    return "\n".join(lines) + "\n"


def _padding(rng: random.Random, count: int) -> list[str]:
    lines: list[str] = []
    for _ in range(count):
        lines += plain_function(rng, _name(rng, 3))
    return lines


def fsdp_project(rng: random.Random, number: int) -> dict[str, str]:
    """One training project. `variant` picks which shape (and which finding) its trainer has."""
    variant = number % 6
    # Every third project reuses the names of project 0: name resolution must stay per project.
    suffix = "" if number % 3 == 0 else f"_{number}"
    parallelize, build_optimizer, setup = f"parallelize{suffix}", f"build_optimizer{suffix}", f"setup_model{suffix}"
    pad = lambda count: "\n".join(_padding(rng, count)) + "\n"  # noqa: E731
    files = {"__init__.py": ""}
    files["parallelize.py"] = (
        '"""Apply FSDP2 to the model."""\nimport torch\nfrom torch.distributed.fsdp import fully_shard\n\n\n'
        f"def {parallelize}(model, mesh):\n    for block in model.layers:\n        fully_shard(block, mesh=mesh)\n"
        "    fully_shard(model, mesh=mesh)\n    return model\n\n\n" + pad(6)
    )
    files["optim.py"] = (
        '"""Optimizers."""\nimport torch\n\n\n'
        f"def {build_optimizer}(model, lr=1e-3):\n    return torch.optim.AdamW(model.parameters(), lr=lr)\n\n\n" + pad(5)
    )
    files["setup.py"] = (
        f'"""Model set-up: calls the parallelize function of another file."""\nfrom .parallelize import {parallelize}\n\n\n'
        f"def {setup}(model, mesh):\n    {parallelize}(model, mesh)\n    return model\n\n\n" + pad(4)
    )
    if variant == 0:  # correct: shard, then the optimizer, then model(x)
        imports, body = f"from .parallelize import {parallelize}\nfrom .optim import {build_optimizer}", [f"{parallelize}(model, mesh)", f"optimizer = {build_optimizer}(model)", "loss = model(x).sum()"]
    elif variant == 1:  # FSDP103 in a file with no FSDP token
        imports, body = f"from .parallelize import {parallelize}\nfrom .optim import {build_optimizer}", [f"{parallelize}(model, mesh)", f"optimizer = {build_optimizer}(model)", "loss = model.forward(x).sum()"]
    elif variant == 2:  # FSDP104: the optimizer is built in a helper file before sharding
        imports, body = f"from .parallelize import {parallelize}\nfrom .optim import {build_optimizer}", [f"optimizer = {build_optimizer}(model)", f"{parallelize}(model, mesh)", "loss = model(x).sum()"]
    elif variant == 3:  # under an alias
        imports, body = f"from .parallelize import {parallelize} as shard_all\nfrom .optim import {build_optimizer}", ["shard_all(model, mesh)", f"optimizer = {build_optimizer}(model)", "loss = model.forward(x).sum()"]
    elif variant == 4:  # as a module attribute
        imports, body = f"from . import parallelize as par\nfrom .optim import {build_optimizer}", [f"par.{parallelize}(model, mesh)", f"optimizer = {build_optimizer}(model)", "loss = model.forward(x).sum()"]
    else:  # through the helper of a third file with no FSDP token
        imports, body = f"from .setup import {setup}\nfrom .optim import {build_optimizer}", [f"{setup}(model, mesh)", f"optimizer = {build_optimizer}(model)", "loss = model.forward(x).sum()"]
    files["trainer.py"] = (
        f'"""The training loop: no FSDP token here."""\nimport torch\n{imports}\n\n\n'
        "def train(model, mesh, x, steps=10):\n    " + "\n    ".join(body) + "\n"
        "    for _ in range(steps):\n        loss.backward()\n        optimizer.step()\n        optimizer.zero_grad()\n    return loss\n\n\n" + pad(8)
    )
    noqa = "  # noqa: FSDP201" if number % 4 == 1 else ""
    files["script.py"] = (
        '"""A standalone FSDP script that saves a sharded state dict."""\nimport torch\nimport torch.nn as nn\n'
        "from torch.distributed.fsdp import fully_shard\n\n\n"
        "def main():\n    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))\n    for layer in model:\n        fully_shard(layer)\n"
        f"    fully_shard(model)\n    torch.save(model.state_dict(), 'checkpoint.pt'){noqa}\n\n\n" + pad(5)
        + '\nif __name__ == "__main__":\n    main()\n'
    )
    files["dist_utils.py"] = (
        '"""torch.distributed set-up, no sharding."""\nimport os\nimport torch.distributed as dist\n\n\n'
        "def init_distributed():\n    dist.init_process_group(backend=os.environ.get('BACKEND', 'gloo'))\n    return dist.get_rank(), dist.get_world_size()\n\n\n" + pad(3)
    )
    return files


def generate(root: Path, lines: int, seed: int = 0, fsdp_share: float = 0.02, lines_per_file: int = 200) -> CorpusStats:
    """Write the corpus under `root` (which must not exist or be empty); the same arguments give the same bytes."""
    rng = random.Random(seed)
    stats = CorpusStats()
    files_wanted = max(1, lines // lines_per_file)
    projects = max(1, round(files_wanted * fsdp_share / FSDP_FILES_PER_PROJECT))

    def write(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        stats.files += 1
        stats.lines += text.count("\n")

    for number in range(projects):
        folder = root / "projects" / f"proj_{number:03d}"
        for name, text in fsdp_project(rng, number).items():
            write(folder / name, text)
            stats.fsdp_files += name != "__init__.py"
    package = 0
    while stats.lines < lines:
        folder = root / "libs" / f"pkg_{package // 20:03d}" / f"sub_{package % 20:02d}"
        names = [f"{_name(rng)}_{index}" for index in range(10)]
        write(folder / "__init__.py", "")
        for index, name in enumerate(names):
            write(folder / f"{name}.py", plain_module(rng, rng.randrange(lines_per_file // 2, lines_per_file * 3 // 2), names[:index]))
            if stats.lines >= lines:
                break
        package += 1
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fsdp-share", type=float, default=0.02)
    args = parser.parse_args()
    stats = generate(args.out, args.lines, args.seed, args.fsdp_share)
    print(f"{args.out}: {stats.files} files, {stats.lines} lines, {stats.fsdp_files} in FSDP projects")


if __name__ == "__main__":
    main()
