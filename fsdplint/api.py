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

import bisect
import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal, Sequence

from fsdplint.config import Settings, find_pyproject, load_settings, select_rules
from fsdplint.engine import Diagnostic as _EngineDiagnostic
from fsdplint.engine import Engine, Result, parses
from fsdplint.registry import all_rules
from fsdplint.source import SourceFile

__all__ = [
    "Diagnostic",
    "Fix",
    "Position",
    "Range",
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
class Position:
    line: int  # 1-based
    column: int  # 1-based, in characters (code points)


@dataclass(frozen=True)
class Range:
    start: Position
    end: Position  # exclusive


@dataclass(frozen=True)
class TextEdit:
    """Replace the text in `range` with `new_text` (an empty range inserts, empty text deletes)."""

    range: Range
    new_text: str


@dataclass(frozen=True)
class Fix:
    message: str  # what the fix does, e.g. "Call `model(...)` so the FSDP hooks run"
    applicability: Applicability  # "unsafe": may change behaviour; the CLI needs --unsafe-fixes
    edits: tuple[TextEdit, ...]  # on the checked text; they do not overlap


@dataclass(frozen=True)
class Diagnostic:
    path: str
    code: str  # "FSDP103"
    name: str  # "forward-bypasses-hooks"
    message: str
    severity: Severity
    range: Range
    fix: Fix | None

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


def apply_edits(text: str, edits: Iterable[TextEdit]) -> str:
    """`text` with `edits` applied; they refer to `text` and must not overlap (ValueError if they do)."""
    starts = _line_starts(text)
    spans = sorted((_offset(text, starts, edit.range.start), _offset(text, starts, edit.range.end), edit.new_text) for edit in edits)
    pieces: list[str] = []
    done = 0
    for start, end, new_text in spans:
        if start < done or end < start:
            raise ValueError(f"overlapping or reversed edit at offset {start}")
        pieces += [text[done:start], new_text]
        done = end
    return "".join(pieces) + text[done:]


def text_edits(before: str, after: str) -> tuple[TextEdit, ...]:
    """Small edits that turn `before` into `after` (e.g. into `fix_source`'s output): the changed runs
    of lines, trimmed to the characters that changed."""
    old_lines, new_lines = _lines(before), _lines(after)
    starts = _line_starts(before)
    edits = []
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        start, end = starts[i1], starts[i2]
        old, new = before[start:end], "".join(new_lines[j1:j2])
        prefix = _whole_words(old, new, len(os.path.commonprefix([old, new])))
        suffix = _whole_words(old[::-1], new[::-1], len(os.path.commonprefix([old[prefix:][::-1], new[prefix:][::-1]])))
        edits.append(TextEdit(Range(_position(starts, start + prefix), _position(starts, end - suffix)), new[prefix:len(new) - suffix]))
    return tuple(edits)


def find_config(path: str | Path) -> Path | None:
    """The nearest pyproject.toml with a `[tool.fsdplint]` table at or above `path`, if any."""
    return find_pyproject(Path(path))


def _whole_words(old: str, new: str, common: int) -> int:
    """`common`, shortened so that cutting both texts there splits no word (an edit reads `for`, not `or`)."""
    def splits_word(text: str) -> bool:
        return 0 < common < len(text) and _WORD.match(text[common - 1]) is not None and _WORD.match(text[common]) is not None

    while common and (splits_word(old) or splits_word(new)):
        common -= 1
    return common


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
            fix=_public_fix(d),
        )
        for d in diagnostics
    ]


def _public_fix(diagnostic: _EngineDiagnostic) -> Fix | None:
    """The fixer's output for this one fix, as the edits that turn the checked text into it."""
    if diagnostic.fix is None or diagnostic.file is None:
        return None
    from fsdplint.fixes import apply_fixes

    before = diagnostic.file.source.text
    after = apply_fixes(diagnostic.file, [diagnostic.fix])
    if after == before or not parses(after):
        return None
    return Fix(diagnostic.fix.message, "safe" if diagnostic.fix.safe else "unsafe", text_edits(before, after))


_WORD = re.compile(r"\w")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def _lines(text: str) -> list[str]:
    """Lines with their endings, split only where Python ends a line (not at form feeds)."""
    return _LINE.findall(text)


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for line in _lines(text):
        starts.append(starts[-1] + len(line))
    return starts


def _position(starts: list[int], offset: int) -> Position:
    line = bisect.bisect_right(starts, offset)
    return Position(line, offset - starts[line - 1] + 1)


def _offset(text: str, starts: list[int], position: Position) -> int:
    if not 1 <= position.line <= len(starts) or position.column < 1:
        raise ValueError(f"position {position.line}:{position.column} is outside the text")
    offset = starts[position.line - 1] + position.column - 1
    if offset > (starts[position.line] if position.line < len(starts) else len(text)):
        raise ValueError(f"position {position.line}:{position.column} is outside the text")
    return offset
