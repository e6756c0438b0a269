"""`[tool.fsdplint]` in the nearest pyproject.toml, merged with command-line flags (flags win)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from fsdplint.rule import Rule, RuleSet

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class ConfigError(ValueError):
    """A configuration problem; the message is shown to the user as is."""


KNOWN_KEYS = {"select", "extend-select", "ignore", "exclude", "extend-exclude", "per-file-ignores"}


@dataclass
class Settings:
    select: list[str] = field(default_factory=lambda: ["ALL"])
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    extend_exclude: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    project_root: Path = field(default_factory=Path.cwd)
    config_path: Path | None = None

    @property
    def excluded(self) -> list[str]:
        """Every pattern a walk skips, besides the defaults: `exclude` and `extend-exclude`."""
        return self.exclude + self.extend_exclude


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above `start` that has a [tool.fsdplint] table."""
    start = start.resolve()
    for folder in (start, *start.parents) if start.is_dir() else start.parents:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                if "fsdplint" in _read_toml(candidate).get("tool", {}):
                    return candidate
            except ConfigError:
                raise
    return None


def _read_toml(path: Path) -> dict:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from None


def _string_list(path: Path, key: str, value: object) -> list[str]:
    if isinstance(value, str):
        # Not taken as a one-item list: `select = "FSDP1"` is more likely a slip than a choice.
        raise ConfigError(f'{path}: [tool.fsdplint] {key} must be a list of strings: write ["{value}"], not "{value}"')
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{path}: [tool.fsdplint] {key} must be a list of strings, got {value!r}")
    return list(value)


def load_settings(config_path: Path | None, start: Path) -> Settings:
    path = config_path or find_pyproject(start)
    if path is None:
        return Settings(project_root=Path.cwd().resolve())
    table = _read_toml(path).get("tool", {}).get("fsdplint", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.fsdplint] must be a table")
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown key in [tool.fsdplint]: {', '.join(unknown)} (known: {', '.join(sorted(KNOWN_KEYS))})")
    settings = Settings(project_root=path.parent.resolve(), config_path=path)
    if "select" in table:
        settings.select = _string_list(path, "select", table["select"])
    settings.extend_select = _string_list(path, "extend-select", table.get("extend-select", []))
    settings.ignore = _string_list(path, "ignore", table.get("ignore", []))
    settings.exclude = _string_list(path, "exclude", table.get("exclude", []))
    settings.extend_exclude = _string_list(path, "extend-exclude", table.get("extend-exclude", []))
    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict):
        raise ConfigError(f"{path}: [tool.fsdplint] per-file-ignores must be a table of pattern = [codes]")
    settings.per_file_ignores = {pattern: _string_list(path, f'per-file-ignores."{pattern}"', codes) for pattern, codes in per_file.items()}
    return settings


def select_rules(ruleset: RuleSet, settings: Settings, select: list[str], extend_select: list[str], ignore: list[str]) -> list[type[Rule]]:
    """The rules to run: `select` (else the configured selection) plus the extensions, less `ignore`."""
    _check_configured_selectors(ruleset, settings)
    chosen: dict[str, type[Rule]] = {}
    for selector in (select or settings.select) + settings.extend_select + extend_select:
        # A prefix that matches only opt-in rules is known, though it selects none of them.
        if not ruleset.expand(selector, include_opt_in=True):
            raise ConfigError(f"unknown rule selector `{selector}` (see `fsdplint rule`)")
        chosen.update((rule.code, rule) for rule in ruleset.expand(selector))
    for selector in settings.ignore + ignore:
        rules = ruleset.expand(selector, include_opt_in=True)
        if not rules:
            raise ConfigError(f"unknown rule selector `{selector}` in ignore (see `fsdplint rule`)")
        for rule in rules:
            chosen.pop(rule.code, None)
    return sorted(chosen.values(), key=lambda rule: rule.code)


def _check_configured_selectors(ruleset: RuleSet, settings: Settings) -> None:
    """An unknown selector in pyproject.toml is an error naming the file and key, wherever it is used,
    even in a key the command line overrides: a typo must never silently turn a rule off."""
    configured = [("select", settings.select), ("extend-select", settings.extend_select), ("ignore", settings.ignore)]
    configured += [(f'per-file-ignores."{pattern}"', codes) for pattern, codes in settings.per_file_ignores.items()]
    for key, selectors in configured:
        for selector in selectors:
            if not ruleset.expand(selector, include_opt_in=True):
                raise ConfigError(f"{settings.config_path}: [tool.fsdplint] {key}: unknown rule selector `{selector}` (see `fsdplint rule`)")
