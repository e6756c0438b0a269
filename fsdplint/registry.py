"""Every rule: the engine's own codes and one `Rule` subclass from each module of `fsdplint.rules`."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from fsdplint.engine_codes import ENGINE_CODES
from fsdplint.rule import Rule, RuleSet


@lru_cache(maxsize=1)
def all_rules() -> RuleSet:
    import fsdplint.rules as package

    rules: list[type[Rule]] = list(ENGINE_CODES)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda info: info.name):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        defined = [
            value for value in vars(module).values()
            if isinstance(value, type) and issubclass(value, Rule) and value is not Rule and value.__module__ == module.__name__
        ]
        if len(defined) != 1:
            raise RuntimeError(f"rule module {module.__name__} must define exactly one Rule, found {len(defined)}")
        rules.append(defined[0])
    return RuleSet(sorted(rules, key=lambda rule: rule.code))
