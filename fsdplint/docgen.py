"""Writes docs/rules/<CODE>.md and the rule table of docs/rules/README.md from the rules themselves.

Run `python -m fsdplint.docgen` after changing a rule; tests/test_docs.py fails when a page is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fsdplint.registry import all_rules
from fsdplint.rule import render_doc


def rule_table() -> str:
    rows = ["| Code | Name | Severity | Fix | Summary |", "| --- | --- | --- | --- | --- |"]
    for rule in all_rules().rules:
        rows.append(f"| [{rule.code}]({rule.code}.md) | {rule.name} | {rule.severity.value} | {rule.fix_availability.value} | {rule.summary} |")
    return "\n".join(rows) + "\n"


def main(root: Path) -> None:
    folder = root / "docs" / "rules"
    folder.mkdir(parents=True, exist_ok=True)
    for rule in all_rules().rules:
        (folder / f"{rule.code}.md").write_text(render_doc(rule))
    (folder / "README.md").write_text("# Rules\n\n" + rule_table())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd())
