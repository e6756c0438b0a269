"""The packages: fsdplint, its rules (rules/) and the verification fixtures (tests/fixtures/).

The fixtures keep their one copy at tests/fixtures/<CODE>/, where the tests and the docs name them,
and ship as `fsdplint.fixtures` so that `fsdplint verify` works after a plain install. Their folders
have no __init__.py: they are found here, not listed in pyproject.toml, so a new rule needs no edit.
"""

from setuptools import find_namespace_packages, setup

fixture_folders = find_namespace_packages("tests/fixtures", exclude=["__pycache__", "*.__pycache__"])
setup(packages=["fsdplint", "fsdplint.model", "fsdplint.rules", "fsdplint.fixtures", *(f"fsdplint.fixtures.{folder}" for folder in fixture_folders)])
