"""fsdplint: a static analyzer for PyTorch FSDP training code.

Public interfaces: the `fsdplint` command, the language server (`fsdplint server`), the flake8
plugin, and the Python API in `fsdplint.api` (`check_source`, `check_paths`, `fix_source`,
`apply_edits`, `text_edits`, `find_config` and the types they return). Every other module is internal and may
change without notice.
"""

__version__ = "0.1.0"
