"""Rule documentation: complete in each rule's docstring, and docs/rules/ generated from it, never drifting."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsdplint.registry import all_rules
from fsdplint.rule import DOC_SECTIONS, render_doc

DOCS = Path(__file__).parent.parent / "docs" / "rules"
RULES = all_rules().rules


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_docstring_has_every_section(rule):
    sections = rule.doc_sections()
    assert list(sections) == list(DOC_SECTIONS)
    assert all(sections.values())


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_docs_page_matches_rule(rule):
    page = DOCS / f"{rule.code}.md"
    assert page.exists(), f"run `python -m fsdplint.docgen` to write {page}"
    assert page.read_text() == render_doc(rule), f"{page} is stale: run `python -m fsdplint.docgen`"


def test_names_are_unique_kebab_case():
    names = [rule.name for rule in RULES]
    assert len(set(names)) == len(names)
    assert all(name == name.lower() and " " not in name and "_" not in name for name in names)


def test_the_configuration_page_lists_every_folder_skipped_by_default():
    from fsdplint.discovery import DEFAULT_EXCLUDES

    page = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    assert [name for name in DEFAULT_EXCLUDES if f"`{name}`" not in page] == []
