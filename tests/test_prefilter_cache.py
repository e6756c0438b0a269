"""The prefilter never changes what is found, and the cache never serves a stale result.

The reference is `Engine(prefilter=False)`: every file parsed into one program. The prefiltered run
parses only the files a trigger token reaches and analyzes them in independent groups; the cached run
reads only changed files and analyzes only changed groups. All three must report the same findings,
cross-file ones included, on the rule fixtures and on a generated corpus with cross-file shapes.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fsdplint.cache import Cache
from fsdplint.config import Settings
from fsdplint.discovery import discover
from fsdplint.engine import Diagnostic, Engine
from fsdplint.registry import all_rules

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


def _corpus_module():
    spec = importlib.util.spec_from_file_location("fsdplint_bench_corpus", ROOT / "benchmarks" / "corpus.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _engine(prefilter: bool = True, select: str = "ALL") -> Engine:
    ruleset = all_rules()
    return Engine(ruleset, ruleset.expand(select), Settings(), prefilter=prefilter)


def _shown(diagnostics: list[Diagnostic]) -> list[tuple]:
    """Everything a report prints of a diagnostic."""
    return [(d.path, d.line, d.column, d.end_line, d.end_column, d.code, d.message, d.severity.value, d.source_lines,
             d.fix_applicability, d.fix.message if d.fix else None, d.edits, d.related) for d in diagnostics]


def _check(root: Path, engine: Engine):
    sources, problems = engine.read(discover([root], [], root, force_exclude=False))
    return engine.check(sources, problems)


def _age(root: Path, seconds: float = 60) -> None:
    """Date every file back, as files are that were not just written (newer ones are re-read by design)."""
    past = time.time() - seconds
    for path in root.rglob("*.py"):
        os.utime(path, (past, past))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    # 8 FSDP projects (every trainer shape, names shared between projects) among plain modules.
    _corpus_module().generate(root, lines=8000, fsdp_share=0.45, lines_per_file=80)
    return root


@pytest.fixture()
def tree(corpus, tmp_path, monkeypatch) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(corpus, root)
    _age(root)
    monkeypatch.chdir(root)
    return root


@pytest.mark.parametrize("select", ["ALL", "FSDP103", "FSDP104,FSDP201"])
def test_prefilter_equivalent_on_corpus(corpus, monkeypatch, select):
    monkeypatch.chdir(corpus)
    reference = _check(corpus, _engine(prefilter=False, select=select))
    filtered = _check(corpus, _engine(select=select))
    assert _shown(filtered.diagnostics) == _shown(reference.diagnostics)
    assert filtered.files_parsed < reference.files_parsed / 2
    if select == "ALL":
        codes = {d.code for d in reference.diagnostics}
        assert {"FSDP103", "FSDP104", "FSDP201"} <= codes
        # Findings in files with no FSDP token: the trainers, and the optimizer helper as a related
        # location of the trainer's call of it (the call is what is wrong, the helper is right).
        assert any(d.path.endswith("trainer.py") and d.code == "FSDP103" for d in reference.diagnostics)
        assert any(d.path.endswith("trainer.py") and d.code == "FSDP104" and d.related[0].path.endswith("optim.py")
                   and d.related[0].message == "optimizer built here" for d in reference.diagnostics)


def test_prefilter_equivalent_on_fixtures(monkeypatch):
    monkeypatch.chdir(FIXTURES)
    reference = _check(FIXTURES, _engine(prefilter=False))
    filtered = _check(FIXTURES, _engine())
    assert reference.diagnostics
    assert _shown(filtered.diagnostics) == _shown(reference.diagnostics)


def _cached(root: Path, cache_dir: Path, engine: Engine | None = None):
    engine = engine or _engine()
    candidates = discover([root], [], root, force_exclude=False)
    return engine.check_cached(candidates, None, Cache(cache_dir, engine.index_key()))


def test_cached_run_equals_cold_run(tree, tmp_path):
    cold = _check(tree, _engine())
    first = _cached(tree, tmp_path / "cache")
    assert _shown(first.diagnostics) == _shown(cold.diagnostics)
    assert first.files_parsed == cold.files_parsed
    again = _cached(tree, tmp_path / "cache")
    assert _shown(again.diagnostics) == _shown(cold.diagnostics)
    assert (again.files_read, again.files_parsed) == (0, 0)
    assert again.files_cached >= cold.files_parsed


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    _age(path.parent, seconds=30)  # an mtime in the past but different: only the content tells


def test_editing_either_file_of_a_cross_file_pair(tree, tmp_path):
    cache = tmp_path / "cache"
    _cached(tree, cache)
    project = tree / "projects" / "proj_001"  # trainer.py calls parallelize.py's function: FSDP103 in trainer.py
    before = [d for d in _cached(tree, cache).diagnostics if d.path == "projects/proj_001/trainer.py"]
    assert [d.code for d in before] == ["FSDP103"] and "parallelize.py:9" in before[0].message

    # The FSDP file moves its shard two lines down: the trainer's finding must say so.
    _edit(project / "parallelize.py", '"""Apply FSDP2 to the model."""\n', '"""Apply FSDP2 to the model."""\n\n\n')
    edited = _cached(tree, cache)
    assert _shown(edited.diagnostics) == _shown(_check(tree, _engine()).diagnostics)
    assert "parallelize.py:11" in [d for d in edited.diagnostics if d.path == "projects/proj_001/trainer.py"][0].message
    assert 0 < edited.files_parsed < 10  # only the group of the edited file

    # The FSDP file stops sharding: the trainer, unchanged, has nothing left to report.
    _edit(project / "parallelize.py", "fully_shard(block, mesh=mesh)", "pass")
    _edit(project / "parallelize.py", "fully_shard(model, mesh=mesh)", "pass")
    edited = _cached(tree, cache)
    assert _shown(edited.diagnostics) == _shown(_check(tree, _engine()).diagnostics)
    assert not [d for d in edited.diagnostics if d.path.startswith("projects/proj_001/")]

    # The trainer (no FSDP token) is fixed by hand in another project.
    _edit(tree / "projects" / "proj_004" / "trainer.py", "model.forward(x)", "model(x)")
    edited = _cached(tree, cache)
    assert _shown(edited.diagnostics) == _shown(_check(tree, _engine()).diagnostics)
    assert not [d for d in edited.diagnostics if d.path == "projects/proj_004/trainer.py"]


def test_a_new_caller_joins_the_analysis(tree, tmp_path):
    cache = tmp_path / "cache"
    _cached(tree, cache)
    (tree / "projects" / "proj_002" / "extra.py").write_text(
        "from .parallelize import parallelize_2\n\n\ndef run(model, mesh, x):\n    parallelize_2(model, mesh)\n    return model.forward(x)\n"
    )
    edited = _cached(tree, cache)
    assert _shown(edited.diagnostics) == _shown(_check(tree, _engine()).diagnostics)
    assert [d.code for d in edited.diagnostics if d.path == "projects/proj_002/extra.py"] == ["FSDP103"]


def test_cache_keys_the_configuration(tree, tmp_path):
    cache = tmp_path / "cache"
    everything = _cached(tree, cache)
    only = _cached(tree, cache, _engine(select="FSDP201"))
    assert {d.code for d in only.diagnostics} == {"FSDP201"}
    assert _shown(only.diagnostics) == _shown(_check(tree, _engine(select="FSDP201")).diagnostics)
    assert _shown(_cached(tree, cache).diagnostics) == _shown(everything.diagnostics)


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fsdplint", "--output-format", "concise", *args, "."],
                          cwd=root, capture_output=True, text=True, timeout=300)


def test_cli_cache_flags_and_two_runs_sharing_a_cache(tree, tmp_path):
    cold = _cli(tree, "--no-cache")
    assert not (tree / ".fsdplint_cache").exists()
    cache = tmp_path / "shared"
    runs = [subprocess.Popen([sys.executable, "-m", "fsdplint", "--output-format", "concise", "--cache-dir", str(cache), "."],
                             cwd=tree, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    assert [run.communicate(timeout=300)[0] for run in runs] == [cold.stdout, cold.stdout]
    warm = _cli(tree, "--cache-dir", str(cache), "-v")
    assert warm.stdout == cold.stdout and warm.returncode == cold.returncode == 1
    assert " 0 read, 0 parsed" in warm.stderr
    assert (cache / "CACHEDIR.TAG").exists() and (cache / ".gitignore").read_text().strip().endswith("*")
    default = _cli(tree)
    assert default.stdout == cold.stdout and (tree / ".fsdplint_cache").is_dir()
