"""fsdplint: a static analyzer for PyTorch FSDP training code.

Public interfaces: the `fsdplint` command, the language server (`fsdplint server`), the flake8
plugin, and the Python API in `fsdplint.api` (`check_source`, `check_paths`, `fix_source`,
`apply_edits`, `text_edits`, `find_config` and the types they return). Every other module is internal and may
change without notice.
"""

__version__ = "0.1.0"

# fsdplint is not on PyPI yet: it installs from its repository, or editable from a checkout.
REPOSITORY = "https://github.com/fsdplint/fsdplint"


def install_commands(extra: str) -> tuple[str, str]:
    """The pip commands that install fsdplint with `extra` (verify, lsp): from the repository, and in a checkout."""
    return f"pip install 'fsdplint[{extra}] @ git+{REPOSITORY}'", f"pip install -e '.[{extra}]'"
