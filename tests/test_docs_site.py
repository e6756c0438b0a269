"""The docs site: mkdocs builds it from docs/ in strict mode (no broken link, no page left out of
the navigation), and its rule pages and navigation come from the rules themselves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fsdplint.docgen import with_rules_nav
from fsdplint.registry import all_rules

ROOT = Path(__file__).parent.parent


def test_navigation_lists_every_rule():
    text = (ROOT / "mkdocs.yml").read_text()
    assert with_rules_nav(text) == text, "mkdocs.yml's rule navigation is stale: run `python -m fsdplint.docgen`"


def test_site_builds_in_strict_mode(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[test]')")
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for rule in all_rules().rules:
        page = site / "rules" / rule.code / "index.html"
        assert rule.name in page.read_text(), page
    for page in ("index.html", "usage/index.html", "configuration/index.html", "ci/index.html", "editors/index.html", "verification/index.html"):
        assert (site / page).is_file(), page
    assert "fsdplint/fsdplint@" in (site / "ci" / "index.html").read_text()
