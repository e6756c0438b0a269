"""The flake8 plugin: `flake8` reports the FSDP rules too, once fsdplint is installed beside it.

flake8 owns everything around the findings: selection (`--select`, `--extend-ignore`), its
`per-file-ignores`, and `# noqa` comments, including `--disable-noqa`. So every rule runs here, line
`# noqa` comments are left to flake8, and `[tool.fsdplint]` is not read. flake8 only accepts plugin
codes of up to three letters, so the plugin registers as `FSD`, the prefix of every FSDPnnn code
(a config file's `ignore` takes only such codes; `select`, `per-file-ignores` and noqa take `FSDP103`).
Each file is checked on its own (the CLI also follows calls across files).
"""

from __future__ import annotations

import ast
from typing import Iterator

from fsdplint import __version__, api


class Flake8Plugin:
    name = "fsdplint"
    version = __version__

    # flake8 passes arguments by these names; `tree` must be asked for to run once per file.
    def __init__(self, tree: ast.AST, lines: list[str], filename: str) -> None:
        self.text = "".join(lines)
        self.filename = filename

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        for diagnostic in api.check_source(self.text, self.filename, noqa=False):
            # flake8 columns are 0-based; it adds one when it prints them.
            yield diagnostic.line, diagnostic.column - 1, f"{diagnostic.code} {diagnostic.message}", type(self)
