"""The README's promises: its test command is what CI runs, and its rule table is current."""

from __future__ import annotations

import re
from pathlib import Path

from fsdplint.docgen import rule_table

ROOT = Path(__file__).parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```bash\n(.+?)\n```", readme)
    test_command = next(command for command in commands if "pytest" in command)
    assert test_command in (ROOT / ".ci" / "run").read_text().splitlines()


def test_readme_rule_table_is_current():
    table = rule_table().replace("](FSDP", "](docs/rules/FSDP")
    assert table in (ROOT / "README.md").read_text()


def test_docs_rule_index_is_current():
    assert (ROOT / "docs" / "rules" / "README.md").read_text() == "# Rules\n\n" + rule_table()


def test_bundled_example_shows_each_of_its_mistakes():
    # The README's first command runs fsdplint on examples/: every planted mistake must be reported.
    from fsdplint.api import check_paths

    found = sorted((d.line, d.code) for d in check_paths([ROOT / "examples"]))
    assert found == [(38, "FSDP104"), (39, "FSDP107"), (50, "FSDP105"), (51, "FSDP103"), (55, "FSDP201")]
