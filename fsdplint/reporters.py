"""Output formats. Each takes the sorted diagnostics and returns the text to print.

`concise` and `full` are for people and may be colored; the others are for machines (CI systems,
code-quality dashboards, editors) and never are.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Callable, TextIO

from fsdplint import __version__
from fsdplint.edits import TextEdit
from fsdplint.engine import Diagnostic
from fsdplint.rule import RuleSet

DOCS_URL = "https://github.com/fsdplint/fsdplint/blob/main/docs/rules/{code}.md"
FIX_CONTEXT_LINES = 2  # unchanged lines shown around each change of a fix, as ruff does

_ANSI = {"bold": "1", "red": "31", "green": "32", "blue": "34", "cyan": "36"}


def color_enabled(stream: TextIO) -> bool:
    """Whether to color what goes to `stream`.

    A non-empty NO_COLOR turns color off (https://no-color.org); otherwise a non-empty FORCE_COLOR
    turns it on even when piped (https://force-color.org); otherwise only a terminal that is not
    TERM=dumb gets color.
    """
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@dataclass(frozen=True)
class RenderOptions:
    color: bool = False
    show_fixes: bool = False  # `full`: each fix as a diff under its finding
    unsafe_fixes: bool = False  # unsafe fixes count as applicable (`[*]`), as they would be applied

    def style(self, text: str, *styles: str) -> str:
        if not self.color or not text:
            return text
        return f"\x1b[{';'.join(_ANSI[s] for s in styles)}m{text}\x1b[0m"

    def applicable(self, diagnostic: Diagnostic) -> bool:
        return diagnostic.fix is not None and (diagnostic.fix.safe or self.unsafe_fixes)


PLAIN = RenderOptions()


def _marker(d: Diagnostic, options: RenderOptions) -> str:
    return f" [{options.style('*', 'cyan')}]" if options.applicable(d) else ""


def _header(d: Diagnostic, options: RenderOptions) -> str:
    colon = options.style(":", "cyan")
    return (
        f"{options.style(d.path, 'bold')}{colon}{d.line}{colon}{d.column}{colon} "
        f"{options.style(d.code, 'bold', 'red')}{_marker(d, options)}"
    )


def concise(diagnostics: list[Diagnostic], ruleset: RuleSet, options: RenderOptions = PLAIN) -> str:
    return "".join(f"{_header(d, options)} {d.message}\n" for d in diagnostics)


def full(diagnostics: list[Diagnostic], ruleset: RuleSet, options: RenderOptions = PLAIN) -> str:
    blocks = []
    for d in diagnostics:
        gutter = " " * len(str(d.line + max(len(d.source_lines), 1) - 1))
        lines = [f"{_header(d, options)} [{d.severity.value}] {d.message}", *_underlined(d, options)]
        # The other places, as ruff adds notes: `= note: train.py:12:5: sharded here`.
        lines += [f"{gutter} {options.style('= note', 'bold', 'cyan')}: {r.path}:{r.line}:{r.column}: {r.message}" for r in d.related]
        if d.fix is not None:
            help_line = f"{gutter} {options.style('= help', 'bold', 'cyan')}: {d.fix.message}" + ("" if d.fix.safe else " (unsafe fix)")
            lines.append(help_line)
            if options.show_fixes and d.file is not None:
                lines += _fix_diff(d, options)
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def _underlined(d: Diagnostic, options: RenderOptions) -> list[str]:
    """Every line of the finding's span, each underlined where the span covers it (a blank line is
    not), with the rule's name after the last; nothing when there is no text to show."""
    if not d.source_lines:
        return []
    width = len(str(d.line + len(d.source_lines) - 1))
    bar = options.style("|", "bold", "blue")
    rows = [f"{' ' * width} {bar}"]
    for number, text in enumerate(d.source_lines, d.line):
        start = d.column - 1 if number == d.line else len(text) - len(text.lstrip())
        end = d.end_column - 1 if number == d.end_line else len(text)
        rows.append(f"{options.style(f'{number:>{width}}', 'bold', 'blue')} {bar}" + (f" {text}" if text else ""))
        last = number == d.line + len(d.source_lines) - 1
        if last or end > start:
            carets = "^" * max(1, end - start) + (f" {d.name}" if last else "")
            rows.append(f"{' ' * width} {bar} {' ' * start}{options.style(carets, 'bold', 'red')}")
    return rows


def _fix_diff(d: Diagnostic, options: RenderOptions) -> list[str]:
    """The fix of `d` alone as diff hunks, each line numbered in the file before and after it."""
    from fsdplint.fixes import apply_fixes  # needs libcst, already loaded when there is a fix

    before = d.file.source.text.splitlines()
    after = apply_fixes(d.file, [d.fix]).splitlines()
    groups = difflib.SequenceMatcher(None, before, after, autojunk=False).get_grouped_opcodes(FIX_CONTEXT_LINES)
    width = len(str(max(len(before), len(after), 1)))
    bar = options.style("|", "bold", "blue")

    def row(old: int | None, new: int | None, sign: str, text: str, color: str | None) -> str:
        numbers = options.style(f"{'' if old is None else old:>{width}} {'' if new is None else new:>{width}}", "bold", "blue")
        body = f"{sign}{text}" if text else sign.strip()  # no trailing blank on an empty line
        return f"{numbers} {bar}{options.style(body, color) if color else body}"

    title = "Safe fix" if d.fix.safe else "Unsafe fix"
    no_numbers = " " * (2 * width + 1)
    lines = [f"{no_numbers} {bar}", f"{no_numbers} {options.style(title, 'bold', 'cyan')}"]
    for number, group in enumerate(groups):
        if number:
            lines.append(f"{no_numbers} {options.style('...', 'bold', 'blue')}")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines += [row(i + 1, j + 1, " ", before[i], None) for i, j in zip(range(i1, i2), range(j1, j2))]
                continue
            lines += [row(i + 1, None, "-", before[i], "red") for i in range(i1, i2)]
            lines += [row(None, j + 1, "+", after[j], "green") for j in range(j1, j2)]
    return lines


def _json_item(d: Diagnostic) -> dict:
    return {
        "code": d.code,
        "name": d.name,
        "message": d.message,
        "severity": d.severity.value,
        "filename": d.path,
        "location": {"row": d.line, "column": d.column},
        "end_location": {"row": d.end_line, "column": d.end_column},
        "fix": None if d.fix is None else {
            "applicability": d.fix_applicability,
            "message": d.fix.message,
            # As ruff writes them: replace location..end_location (1-based, end exclusive) with content.
            "edits": [{
                "content": edit.new_text,
                "location": {"row": edit.range.start.line, "column": edit.range.start.column},
                "end_location": {"row": edit.range.end.line, "column": edit.range.end.column},
            } for edit in d.edits],
        },
        "url": DOCS_URL.format(code=d.code),
        "related": [{
            "filename": related.path,
            "location": {"row": related.line, "column": related.column},
            "end_location": {"row": related.end_line, "column": related.end_column},
            "message": related.message,
        } for related in d.related],
    }


def as_json(diagnostics: list[Diagnostic], ruleset: RuleSet, options: RenderOptions = PLAIN) -> str:
    return json.dumps([_json_item(d) for d in diagnostics], indent=2) + "\n"


def _escape_property(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A").replace(":", "%3A").replace(",", "%2C")


def _escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github(diagnostics: list[Diagnostic], ruleset: RuleSet, options: RenderOptions = PLAIN) -> str:
    """GitHub Actions workflow commands: each finding becomes an annotation on the pull request."""
    return "".join(
        f"::{'error' if d.severity.value == 'error' else 'warning'} "
        f"title={_escape_property(f'fsdplint ({d.code})')},file={_escape_property(d.path)},"
        f"line={d.line},col={d.column},endLine={d.end_line},endColumn={d.end_column}"
        f"::{_escape_data(f'{d.path}:{d.line}:{d.column}: {d.code} {d.message}')}\n"
        for d in diagnostics
    )


def sarif(diagnostics: list[Diagnostic], ruleset: RuleSet, options: RenderOptions = PLAIN) -> str:
    """SARIF 2.1.0, the format GitHub code scanning and most CI dashboards read."""
    used = sorted({d.code for d in diagnostics})
    rules = [
        {
            "id": code,
            "name": ruleset.by_code[code].name,
            "shortDescription": {"text": ruleset.by_code[code].summary},
            "helpUri": DOCS_URL.format(code=code),
            "defaultConfiguration": {"level": ruleset.by_code[code].severity.value},
        }
        for code in used
    ]
    results = []
    for d in diagnostics:
        uri = d.path.replace("\\", "/")
        result = {
            "ruleId": d.code,
            "ruleIndex": used.index(d.code),
            "level": d.severity.value,
            "message": {"text": d.message},
            "locations": [{"physicalLocation": _sarif_location(d.path, d.line, d.column, d.end_line, d.end_column)}],
        }
        if d.related:
            result["relatedLocations"] = [{
                "id": number,
                "physicalLocation": _sarif_location(related.path, related.line, related.column, related.end_line, related.end_column),
                "message": {"text": related.message},
            } for number, related in enumerate(d.related)]
        if d.fix is not None and d.edits:
            result["fixes"] = [{
                "description": {"text": d.fix.message + ("" if d.fix.safe else " (unsafe fix: check the result)")},
                "artifactChanges": [{"artifactLocation": {"uri": uri}, "replacements": [_sarif_replacement(edit) for edit in d.edits]}],
                "properties": {"applicability": d.fix_applicability},
            }]
        results.append(result)
    document = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "fsdplint", "version": __version__, "informationUri": "https://github.com/fsdplint/fsdplint", "rules": rules}},
            "results": results,
        }],
    }
    return json.dumps(document, indent=2) + "\n"


def _sarif_location(path: str, line: int, column: int, end_line: int, end_column: int) -> dict:
    return {
        "artifactLocation": {"uri": path.replace("\\", "/")},
        "region": {"startLine": line, "startColumn": column, "endLine": end_line, "endColumn": end_column},
    }


def _sarif_replacement(edit: TextEdit) -> dict:
    start, end = edit.range.start, edit.range.end
    return {
        "deletedRegion": {"startLine": start.line, "startColumn": start.column, "endLine": end.line, "endColumn": end.column},
        "insertedContent": {"text": edit.new_text},
    }


def junit(diagnostics: list[Diagnostic], ruleset: RuleSet, options: RenderOptions = PLAIN) -> str:
    """JUnit XML as ruff writes it: a test suite per file, a failed test case per finding."""
    package = "org.fsdplint"
    suites = ET.Element("testsuites", name="fsdplint", tests=str(max(len(diagnostics), 1)), failures=str(len(diagnostics)), errors="0")
    by_path: dict[str, list[Diagnostic]] = {}
    for d in diagnostics:
        by_path.setdefault(d.path, []).append(d)
    if not by_path:
        suite = ET.SubElement(suites, "testsuite", name="fsdplint", tests="1", disabled="0", errors="0", failures="0", package=package)
        ET.SubElement(suite, "testcase", name="No errors found", classname="fsdplint")
    for path, found in sorted(by_path.items()):
        suite = ET.SubElement(suites, "testsuite", name=path, tests=str(len(found)), disabled="0", errors="0", failures=str(len(found)), package=package)
        classname = str(PurePath(path).with_suffix("")) if PurePath(path).suffix else path
        for d in found:
            case = ET.SubElement(suite, "testcase", name=f"{package}.{d.code}", classname=classname, line=str(d.line), column=str(d.column))
            properties = ET.SubElement(case, "properties")
            ET.SubElement(properties, "property", name="severity", value=d.severity.value)
            failure = ET.SubElement(case, "failure", message=d.message)
            failure.text = f"line {d.line}, col {d.column}, {d.message}"
    ET.indent(suites, space="    ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _gitlab_path(path: str) -> str:
    """The path relative to the project, as GitLab links it to the repository."""
    project = os.environ.get("CI_PROJECT_DIR")
    if project and Path(path).is_absolute():
        try:
            return Path(path).relative_to(project).as_posix()
        except ValueError:
            pass
    return Path(path).as_posix()


def gitlab(diagnostics: list[Diagnostic], ruleset: RuleSet, options: RenderOptions = PLAIN) -> str:
    """GitLab's code quality report (a subset of Code Climate's format).

    GitLab tells a new finding from a fixed one by its fingerprint, so the fingerprint must survive
    edits elsewhere in the file: it hashes the path, the code and the text of the offending line,
    never the line number (and not the message, which can name other lines). Identical findings on
    identical lines get a counter so that each fingerprint is unique.
    """
    issues = []
    seen: Counter[str] = Counter()
    for d in diagnostics:
        path = _gitlab_path(d.path)
        identity = "\0".join((path, d.code, d.source_lines[0].strip() if d.source_lines else ""))
        seen[identity] += 1
        fingerprint = hashlib.sha256(f"{identity}\0{seen[identity]}".encode()).hexdigest()
        issues.append({
            "description": f"{d.code}: {d.message}",
            "check_name": d.code,
            "fingerprint": fingerprint,
            "severity": "major" if d.severity.value == "error" else "minor",
            "location": {"path": path, "lines": {"begin": d.line, "end": d.end_line}},
        })
    return json.dumps(issues, indent=2) + "\n"


def pylint(diagnostics: list[Diagnostic], ruleset: RuleSet, options: RenderOptions = PLAIN) -> str:
    """`path:line: [CODE] message`, the format pylint's parsers (and ruff's `pylint`) use."""
    return "".join(f"{d.path}:{d.line}: [{d.code}] {d.message}\n" for d in diagnostics)


FORMATS: dict[str, Callable[[list[Diagnostic], RuleSet, RenderOptions], str]] = {
    "concise": concise,
    "full": full,
    "json": as_json,
    "github": github,
    "sarif": sarif,
    "junit": junit,
    "gitlab": gitlab,
    "pylint": pylint,
}
HUMAN_FORMATS = ("concise", "full")  # followed by the summary; the others are read by machines


def statistics(diagnostics: list[Diagnostic], options: RenderOptions = PLAIN) -> str:
    counts = Counter((d.code, d.name) for d in diagnostics)
    fixable = Counter(d.code for d in diagnostics if options.applicable(d))
    width = max((len(str(n)) for n in counts.values()), default=1)
    return "".join(
        f"{count:>{width}}\t{code}\t{'[*] ' if fixable[code] else ''}{name}\n"
        for (code, name), count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    )


def fixed_listing(fixed: list[Diagnostic]) -> str:
    """Ruff's `--show-fixes` account of what `--fix` changed, per file and rule."""
    by_path: dict[str, Counter[tuple[str, str]]] = {}
    for d in fixed:
        by_path.setdefault(d.path, Counter())[(d.code, d.name)] += 1
    lines = [f"Fixed {_count(len(fixed), 'error')}:"]
    for path, counts in sorted(by_path.items()):
        lines.append(f"- {path}:")
        lines += [f"    {count} × {code} ({name})" for (code, name), count in sorted(counts.items())]
    return "\n".join(lines) + "\n\n"


def _count(number: int, noun: str, plural: str = "s") -> str:
    return f"{number} {noun}{'' if number == 1 else plural}"


def summary(diagnostics: list[Diagnostic], fixed: int, options: RenderOptions = PLAIN) -> str:
    """Ruff's closing lines: how many, how many fixed, and how to fix the rest."""
    remaining = len(diagnostics)
    warnings = sum(1 for d in diagnostics if d.severity.value == "warning")
    if fixed:
        # What was fixed is not told apart by severity: with warnings left, they are "problems".
        found = _count(remaining + fixed, "problem" if warnings else "error")
        lines = [f"Found {found} ({fixed} fixed, {remaining} remaining)."]
    elif remaining:
        tally = [_count(count, noun) for count, noun in ((remaining - warnings, "error"), (warnings, "warning")) if count]
        lines = [f"Found {' and '.join(tally)}."]
    else:
        lines = ["All checks passed!"]
    applicable = sum(1 for d in diagnostics if options.applicable(d))
    hidden = sum(1 for d in diagnostics if d.fix is not None and not options.applicable(d))
    hint = f"{_count(hidden, 'hidden fix', 'es')} can be enabled with the `--unsafe-fixes` option"
    star = f"[{options.style('*', 'cyan')}]"
    if applicable and hidden:
        lines.append(f"{star} {applicable} fixable with the `--fix` option ({hint}).")
    elif applicable:
        lines.append(f"{star} {applicable} fixable with the `--fix` option.")
    elif hidden:
        lines.append(f"No fixes available ({hint}).")
    return "\n".join(lines) + "\n"
