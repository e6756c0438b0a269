"""The Python API: check or fix source text in memory, as the CLI would, without touching files."""

from __future__ import annotations

from pathlib import Path

from fsdplint.config import Settings
from fsdplint.engine import Diagnostic, Engine, Result
from fsdplint.registry import all_rules
from fsdplint.source import SourceFile, decode_source

__all__ = ["Diagnostic", "check_paths", "check_source", "fix_source"]


def _engine(select: list[str] | None) -> Engine:
    ruleset = all_rules()
    selected = {rule.code: rule for selector in (select or ["ALL"]) for rule in ruleset.expand(selector)}
    return Engine(ruleset, sorted(selected.values(), key=lambda rule: rule.code), Settings())


def _run(text: str, path: str, select: list[str] | None, fix: bool, unsafe_fixes: bool) -> Result:
    source: SourceFile = decode_source(text.encode("utf-8"), Path(path), path)
    return _engine(select).check({path: source}, [], fix=fix, unsafe_fixes=unsafe_fixes)


def check_paths(paths: list[str | Path], select: list[str] | None = None) -> list[Diagnostic]:
    """Diagnostics for files and directories, analyzed together (functions are followed across them)."""
    from fsdplint.discovery import discover

    engine = _engine(select)
    candidates = discover([Path(p) for p in paths], [], Path.cwd().resolve(), force_exclude=False)
    sources, problems = engine.read(candidates)
    return engine.check(sources, problems).diagnostics


def check_source(text: str, path: str = "<string>", select: list[str] | None = None) -> list[Diagnostic]:
    """Diagnostics for `text`, sorted by position. `select` takes codes, prefixes or names."""
    return _run(text, path, select, fix=False, unsafe_fixes=False).diagnostics


def fix_source(text: str, path: str = "<string>", select: list[str] | None = None, unsafe_fixes: bool = False) -> str:
    """`text` with the fixes applied (safe ones, and unsafe ones too if asked)."""
    result = _run(text, path, select, fix=True, unsafe_fixes=unsafe_fixes)
    return result.sources[path].text
