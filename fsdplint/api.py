"""fsdplint's public Python API: check and fix source in memory, as the CLI does, without writing files.

Editors, notebooks and review bots use this module; fsdplint's language server is built on it.
Everything else in the package is internal and may change between releases.

Positions are 1-based lines and 1-based columns counted in characters (Unicode code points), as
the CLI prints them; a `Range` ends just past its last character. Lines end at `\\n`, `\\r\\n` or
`\\r`, as in Python. A fix is given as `TextEdit`s on the checked text, so a caller can apply it
without fsdplint (editors count columns in their own units: convert each position on its line).

    from fsdplint.api import apply_edits, check_source, fix_source

    text = open("train.py").read()
    for d in check_source(text, "train.py"):
        print(d.line, d.column, d.code, d.message)
        if d.fix and d.fix.applicability == "safe":
            print(apply_edits(text, d.fix.edits))   # this one fix
    print(fix_source(text, "train.py"))                  # every safe fix
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal, Sequence

from fsdplint.config import Settings, find_pyproject, load_settings, select_rules
from fsdplint.edits import Position, Range, TextEdit, apply_edits, text_edits
from fsdplint.engine import Diagnostic as _EngineDiagnostic
from fsdplint.engine import Engine, Result
from fsdplint.registry import all_rules
from fsdplint.source import SourceFile

__all__ = [
    "Diagnostic",
    "Fix",
    "Position",
    "Range",
    "RelatedLocation",
    "TextEdit",
    "apply_edits",
    "check_paths",
    "check_source",
    "find_config",
    "fix_source",
    "text_edits",
]

Severity = Literal["error", "warning"]
Applicability = Literal["safe", "unsafe"]


@dataclass(frozen=True)
class Fix:
    message: str  # what the fix does, e.g. "Call `model(...)` so the FSDP hooks run"
    applicability: Applicability  # "unsafe": may change behaviour; the CLI needs --unsafe-fixes
    edits: tuple[TextEdit, ...]  # on the checked text; they do not overlap


@dataclass(frozen=True)
class RelatedLocation:
    """Another place a finding involves: where the module was sharded, a call that led to the finding."""

    path: str
    range: Range
    message: str  # "sharded here"


@dataclass(frozen=True)
class Diagnostic:
    path: str
    code: str  # "FSDP103"
    name: str  # "forward-bypasses-hooks"
    message: str
    severity: Severity
    range: Range
    fix: Fix | None
    related: tuple[RelatedLocation, ...] = ()

    @property
    def line(self) -> int:
        return self.range.start.line

    @property
    def column(self) -> int:
        return self.range.start.column


def check_source(
    text: str,
    path: str = "<string>",
    *,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    config: str | Path | None = None,
    noqa: bool = True,
) -> list[Diagnostic]:
    """Diagnostics for `text`, sorted by position.

    `path` is the name shown in messages and matched by `per-file-ignores`. `select` and `ignore` take
    codes (`FSDP103`), prefixes (`FSDP1`), names or `ALL`, and replace the configured ones. `config`
    is a pyproject.toml whose `[tool.fsdplint]` table applies (see `find_config`); without it, every
    rule runs. `noqa=False` ignores `# noqa` comments on lines, for a host tool that applies its
    own (flake8). Raises ValueError for an unknown selector or a bad configuration.
    """
    engine = _engine(select, ignore, config, noqa)
    return _public(_check_text(engine, text, path, fix=False, unsafe_fixes=False).diagnostics)


def check_paths(
    paths: Iterable[str | Path],
    *,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    config: str | Path | None = None,
) -> list[Diagnostic]:
    """Diagnostics for files and directories, analyzed together (calls are followed across files).

    Directories are walked as by the CLI, skipping `exclude`d and `.gitignore`d files.
    """
    from fsdplint.discovery import discover

    engine = _engine(select, ignore, config, True)
    candidates = discover([Path(p) for p in paths], engine.settings.excluded, engine.settings.project_root, force_exclude=False)
    sources, problems = engine.read(candidates)
    return _public(engine.check(sources, problems).diagnostics)


def fix_source(
    text: str,
    path: str = "<string>",
    *,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    config: str | Path | None = None,
    unsafe_fixes: bool = False,
) -> str:
    """`text` with every safe fix applied (and the unsafe ones too with `unsafe_fixes`), as `--fix` does.

    Fixes that enable further fixes are applied in passes; a fix whose output would not parse is dropped.
    """
    engine = _engine(select, ignore, config, True)
    return _check_text(engine, text, path, fix=True, unsafe_fixes=unsafe_fixes).sources[path].text


def find_config(path: str | Path) -> Path | None:
    """The nearest pyproject.toml with a `[tool.fsdplint]` table at or above `path`, if any."""
    return find_pyproject(Path(path))


def _engine(select: Sequence[str] | None, ignore: Sequence[str] | None, config: str | Path | None, line_noqa: bool) -> Engine:
    settings = load_settings(Path(config), Path.cwd()) if config else Settings(project_root=Path.cwd().resolve())
    ruleset = all_rules()
    return Engine(ruleset, select_rules(ruleset, settings, list(select or []), [], list(ignore or [])), settings, line_noqa=line_noqa)


def _check_text(engine: Engine, text: str, path: str, fix: bool, unsafe_fixes: bool) -> Result:
    source = SourceFile(path=Path(path), display=path, text=text, encoding="utf-8", bom=False)
    return engine.check({path: source}, [], fix=fix, unsafe_fixes=unsafe_fixes)


def _public(diagnostics: list[_EngineDiagnostic]) -> list[Diagnostic]:
    return [
        Diagnostic(
            path=d.path,
            code=d.code,
            name=d.name,
            message=d.message,
            severity=d.severity.value,
            range=Range(Position(d.line, d.column), Position(d.end_line, d.end_column)),
            fix=Fix(d.fix.message, d.fix_applicability, d.edits) if d.fix is not None and d.edits else None,
            related=tuple(RelatedLocation(r.path, Range(Position(r.line, r.column), Position(r.end_line, r.end_column)), r.message)
                          for r in d.related),
        )
        for d in diagnostics
    ]


