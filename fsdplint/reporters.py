"""Output formats. Each takes the sorted diagnostics and returns the text to print."""

from __future__ import annotations

import json
from collections import Counter
from typing import Callable

from fsdplint import __version__
from fsdplint.engine import Diagnostic
from fsdplint.rule import RuleSet

DOCS_URL = "https://github.com/fsdplint/fsdplint/blob/main/docs/rules/{code}.md"


def _marker(diagnostic: Diagnostic) -> str:
    return " [*]" if diagnostic.fix_applicability == "safe" else ""


def concise(diagnostics: list[Diagnostic], ruleset: RuleSet) -> str:
    return "".join(
        f"{d.path}:{d.line}:{d.column}: {d.code}{_marker(d)} {d.message}\n" for d in diagnostics
    )


def full(diagnostics: list[Diagnostic], ruleset: RuleSet) -> str:
    blocks = []
    for d in diagnostics:
        gutter = " " * len(str(d.line))
        width = max(1, (d.end_column - d.column) if d.end_line == d.line else len(d.source_line) - d.column + 1)
        lines = [
            f"{d.path}:{d.line}:{d.column}: {d.code}{_marker(d)} [{d.severity.value}] {d.message}",
            f"{gutter} |",
            f"{d.line} | {d.source_line}",
            f"{gutter} | {' ' * (d.column - 1)}{'^' * width} {d.name}",
        ]
        if d.fix is not None:
            lines.append(f"{gutter} = help: {d.fix.message}" + ("" if d.fix.safe else " (unsafe fix)"))
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def _json_item(d: Diagnostic) -> dict:
    return {
        "code": d.code,
        "name": d.name,
        "message": d.message,
        "severity": d.severity.value,
        "filename": d.path,
        "location": {"row": d.line, "column": d.column},
        "end_location": {"row": d.end_line, "column": d.end_column},
        "fix": None if d.fix is None else {"applicability": d.fix_applicability, "message": d.fix.message},
        "url": DOCS_URL.format(code=d.code),
    }


def as_json(diagnostics: list[Diagnostic], ruleset: RuleSet) -> str:
    return json.dumps([_json_item(d) for d in diagnostics], indent=2) + "\n"


def _escape_property(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A").replace(":", "%3A").replace(",", "%2C")


def _escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github(diagnostics: list[Diagnostic], ruleset: RuleSet) -> str:
    """GitHub Actions workflow commands: each finding becomes an annotation on the pull request."""
    return "".join(
        f"::{'error' if d.severity.value == 'error' else 'warning'} "
        f"title={_escape_property(f'fsdplint ({d.code})')},file={_escape_property(d.path)},"
        f"line={d.line},col={d.column},endLine={d.end_line},endColumn={d.end_column}"
        f"::{_escape_data(f'{d.path}:{d.line}:{d.column}: {d.code} {d.message}')}\n"
        for d in diagnostics
    )


def sarif(diagnostics: list[Diagnostic], ruleset: RuleSet) -> str:
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
    results = [
        {
            "ruleId": d.code,
            "ruleIndex": used.index(d.code),
            "level": d.severity.value,
            "message": {"text": d.message},
            "locations": [{
                "physicalLocation": {
                    "artifactLocation": {"uri": d.path.replace("\\", "/")},
                    "region": {"startLine": d.line, "startColumn": d.column, "endLine": d.end_line, "endColumn": d.end_column},
                }
            }],
        }
        for d in diagnostics
    ]
    document = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "fsdplint", "version": __version__, "informationUri": "https://github.com/fsdplint/fsdplint", "rules": rules}},
            "results": results,
        }],
    }
    return json.dumps(document, indent=2) + "\n"


FORMATS: dict[str, Callable[[list[Diagnostic], RuleSet], str]] = {
    "concise": concise,
    "full": full,
    "json": as_json,
    "github": github,
    "sarif": sarif,
}


def statistics(diagnostics: list[Diagnostic]) -> str:
    counts = Counter((d.code, d.name) for d in diagnostics)
    fixable = Counter(d.code for d in diagnostics if d.fix_applicability == "safe")
    width = max((len(str(n)) for n in counts.values()), default=1)
    return "".join(
        f"{count:>{width}}\t{code}\t{'[*] ' if fixable[code] else ''}{name}\n"
        for (code, name), count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    )


def summary(diagnostics: list[Diagnostic], fixed: int, unsafe_fixes: bool) -> str:
    """Ruff's closing lines: how many, how many fixed, and how to fix the rest."""
    lines = []
    remaining = len(diagnostics)
    if fixed:
        lines.append(f"Found {remaining + fixed} error{'s' if remaining + fixed != 1 else ''} ({fixed} fixed, {remaining} remaining).")
    elif remaining:
        lines.append(f"Found {remaining} error{'s' if remaining != 1 else ''}.")
    elif not fixed:
        lines.append("All checks passed!")
    safe = sum(1 for d in diagnostics if d.fix_applicability == "safe")
    unsafe = sum(1 for d in diagnostics if d.fix_applicability == "unsafe")
    if safe:
        lines.append(f"[*] {safe} fixable with the `--fix` option" + (f" ({unsafe} hidden fixes can be enabled with the `--unsafe-fixes` option)." if unsafe and not unsafe_fixes else "."))
    elif unsafe and not unsafe_fixes:
        lines.append(f"No fixes available ({unsafe} hidden fixes can be enabled with the `--unsafe-fixes` option).")
    elif unsafe:
        lines.append(f"[*] {unsafe} fixable with the `--fix --unsafe-fixes` options.")
    return "\n".join(lines) + "\n"
