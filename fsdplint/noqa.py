"""`# noqa` comments: which codes each line suppresses, and which file-wide exemptions exist.

Comments are found with the tokenizer, so a `# noqa` inside a string is not one. Codes of other
tools (`# noqa: E501`) are left alone; only codes that look like ours are checked for being known.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

_LINE_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.I)
_FILE_NOQA = re.compile(r"^#\s*fsdplint:\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.I)
OUR_PREFIX = "FSDP"
NOQA_TOKEN = "noqa"  # what the file index records for a file `may_hold_our_noqa` accepts
_ANY_NOQA = re.compile("noqa", re.I)


def may_hold_our_noqa(text: str) -> bool:
    """A cheap test: only such a file can hold a `# noqa` that fsdplint must check (FSDP003, FSDP004)."""
    return OUR_PREFIX in text and _ANY_NOQA.search(text) is not None


@dataclass
class NoqaDirective:
    line: int
    column: int  # 1-based column of the `#`
    codes: tuple[str, ...] | None  # None: a bare `# noqa`, suppressing everything
    used: set[str] = field(default_factory=set)

    def suppresses(self, code: str) -> bool:
        return self.codes is None or code in self.codes


@dataclass
class Suppressions:
    lines: dict[int, NoqaDirective] = field(default_factory=dict)
    file_codes: set[str] = field(default_factory=set)
    file_all: bool = False

    def suppress(self, code: str, line: int) -> bool:
        if self.file_all or code in self.file_codes:
            return True
        directive = self.lines.get(line)
        if directive and directive.suppresses(code):
            directive.used.add(code)
            return True
        return False


def _codes(text: str | None) -> tuple[str, ...] | None:
    return tuple(code.upper() for code in re.split(r"[\s,]+", text.strip())) if text else None


def parse_suppressions(text: str) -> Suppressions:
    suppressions = Suppressions()
    if "noqa" not in text.lower():
        return suppressions
    try:
        tokens = [token for token in tokenize.generate_tokens(io.StringIO(text).readline) if token.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return suppressions  # the file does not tokenize: the syntax error is reported instead
    for token in tokens:
        line, column = token.start
        whole = _FILE_NOQA.match(token.string)
        if whole and token.line[:column].strip() == "":
            codes = _codes(whole.group("codes"))
            if codes is None:
                suppressions.file_all = True
            else:
                suppressions.file_codes.update(codes)
            continue
        match = _LINE_NOQA.search(token.string)
        if match:
            suppressions.lines[line] = NoqaDirective(line, column + 1 + match.start(), _codes(match.group("codes")))
    return suppressions


def add_noqa(text: str, codes_by_line: dict[int, set[str]]) -> tuple[str, int]:
    """`text` with each line's codes added to its `# noqa` (a new `  # noqa: CODE, ...` at the end of
    a line without one, as ruff writes it), and how many lines changed.

    A line that ends inside a string or with a `\\` continuation cannot take a comment and is left as
    it is; so is a file that does not tokenize.
    """
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return text, 0
    # Lines as tokenize numbers them: a comment can end a line that ends with a NEWLINE or NL token.
    open_ends = {token.start[0] for token in tokens if token.type in (tokenize.NEWLINE, tokenize.NL)}
    comments = {token.start[0]: token for token in tokens if token.type == tokenize.COMMENT}
    lines = io.StringIO(text).readlines()
    changed = 0
    for number, codes in sorted(codes_by_line.items()):
        if number not in open_ends or number > len(lines):
            continue
        line = lines[number - 1]
        body = line.rstrip("\r\n")
        ending = line[len(body):]
        comment = comments.get(number)
        directive = _LINE_NOQA.search(comment.string) if comment else None
        if directive and directive.group("codes") is None:
            continue  # a bare `# noqa` already suppresses every code
        if directive:
            missing = sorted(codes - set(_codes(directive.group("codes"))))
            end = comment.start[1] + directive.end("codes")
            body = body[:end] + "".join(f", {code}" for code in missing) + body[end:]
        else:
            body = body.rstrip(" \t") + f"  # noqa: {', '.join(sorted(codes))}"
        if body + ending != line:
            lines[number - 1] = body + ending
            changed += 1
    return "".join(lines), changed
