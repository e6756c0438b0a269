"""Writes docs/rules/<CODE>.md, the rule table of docs/rules/README.md and the rules' part of the
docs site's navigation (mkdocs.yml) from the rules themselves.

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


NAV_START = "      # The rules, written by `python -m fsdplint.docgen`:\n"
NAV_END = "      # (end of the rules)\n"


def with_rules_nav(mkdocs_yml: str) -> str:
    """mkdocs.yml with one navigation entry per rule between its two marker comments."""
    start = mkdocs_yml.index(NAV_START) + len(NAV_START)
    end = mkdocs_yml.index(NAV_END)
    entries = "".join(f"      - {rule.code} {rule.name}: rules/{rule.code}.md\n" for rule in all_rules().rules)
    return mkdocs_yml[:start] + entries + mkdocs_yml[end:]


def main(root: Path) -> None:
    folder = root / "docs" / "rules"
    folder.mkdir(parents=True, exist_ok=True)
    for rule in all_rules().rules:
        (folder / f"{rule.code}.md").write_text(render_doc(rule))
    (folder / "README.md").write_text("# Rules\n\n" + rule_table())
    mkdocs_yml = root / "mkdocs.yml"
    if mkdocs_yml.exists():
        mkdocs_yml.write_text(with_rules_nav(mkdocs_yml.read_text()))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd())
