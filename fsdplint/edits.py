"""Text edits: the form a fix takes outside fsdplint (JSON and SARIF output, the API, the language server).

Positions are 1-based lines and 1-based columns counted in characters (Unicode code points); a
`Range` ends just past its last character. Lines end at `\\n`, `\\r\\n` or `\\r`, as in Python.
"""

from __future__ import annotations

import bisect
import difflib
import os
import re
from dataclasses import dataclass
from typing import Iterable


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


def _whole_words(old: str, new: str, common: int) -> int:
    """`common`, shortened so that cutting both texts there splits no word (an edit reads `for`, not `or`)."""
    def splits_word(text: str) -> bool:
        return 0 < common < len(text) and _WORD.match(text[common - 1]) is not None and _WORD.match(text[common]) is not None

    while common and (splits_word(old) or splits_word(new)):
        common -= 1
    return common


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
