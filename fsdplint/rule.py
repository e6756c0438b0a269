"""What a rule is: its metadata (one source for messages, docs and `fsdplint rule`) and its check.

A rule module in `rules/` defines one `Rule` subclass. Its docstring is the rule's documentation in
ruff's shape (What it does / Why is this bad? / Example / Use instead / Fix safety / References);
`docs/rules/<CODE>.md` and `fsdplint rule CODE` are both rendered from it by `render_doc`.
"""

from __future__ import annotations

import enum
import inspect
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Iterable

from fsdplint.distributed import FSDP_TOKENS

if TYPE_CHECKING:  # the model imports libcst; linting a file with no FSDP token never needs it
    import libcst as cst

    from fsdplint.fixes import Fix
    from fsdplint.model import FileModel, Program


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"


class FixAvailability(str, enum.Enum):
    """Ruff's split: safe fixes apply with --fix, unsafe ones also need --unsafe-fixes."""

    NONE = "none"
    SAFE = "safe"
    UNSAFE = "unsafe"
    SOMETIMES_SAFE = "sometimes"  # some findings get a safe fix, others an unsafe one


DOC_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety", "References")


@dataclass(frozen=True)
class Related:
    """Another place a finding involves (where the module was sharded, a call that led to the finding),
    with what happened there: "sharded here"."""

    file: FileModel
    node: cst.CSTNode
    message: str


@dataclass
class Finding:
    """What a rule reports: a node in a file (where the user must change the code), a message, maybe a
    fix, and the other places involved."""

    file: FileModel
    node: cst.CSTNode
    message: str
    fix: Fix | None = None
    severity: Severity | None = None  # None: the rule's own severity
    rule_code: str = ""  # set by the engine
    related: tuple[Related, ...] = ()


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]  # kebab-case, accepted wherever a code is
    summary: ClassVar[str]
    severity: ClassVar[Severity] = Severity.ERROR
    fix_availability: ClassVar[FixAvailability] = FixAvailability.NONE
    # A file is parsed for this rule only if its text holds one of these substrings.
    trigger_tokens: ClassVar[tuple[str, ...]] = FSDP_TOKENS
    # Engine-emitted codes (syntax errors, noqa problems) have no check of their own.
    engine_only: ClassVar[bool] = False
    # An opt-in rule (a codemod such as the FSDP1 -> FSDP2 migration) runs only when its code or
    # name is selected explicitly: `ALL` and prefixes (`FSDP5`) leave it out, as ruff does for
    # preview rules under `explicit-preview-rules`. Ignoring by prefix or `ALL` still covers it.
    opt_in: ClassVar[bool] = False

    def check(self, program: Program) -> Iterable[Finding]:
        raise NotImplementedError(f"{self.code} has no check")

    @classmethod
    def documentation(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def doc_sections(cls) -> dict[str, str]:
        """The docstring split at its `## Heading` lines."""
        sections: dict[str, str] = {}
        for match in re.finditer(r"^## (.+?)\n(.*?)(?=^## |\Z)", cls.documentation(), re.S | re.M):
            sections[match.group(1).strip()] = match.group(2).strip()
        return sections


@dataclass
class RuleSet:
    """Every known rule, looked up by code or kebab-case name."""

    rules: list[type[Rule]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.by_code = {rule.code: rule for rule in self.rules}
        self.by_name = {rule.name: rule for rule in self.rules}

    def lookup(self, code_or_name: str) -> type[Rule] | None:
        return self.by_code.get(code_or_name.upper()) or self.by_name.get(code_or_name.lower())

    def expand(self, selector: str, include_opt_in: bool = False) -> list[type[Rule]]:
        """A code, a code prefix (`FSDP1`), a kebab-case name, or `ALL`.

        Opt-in rules come only from their exact code or name, unless `include_opt_in` (for ignores).
        """
        rule = self.lookup(selector)
        if rule:
            return [rule]
        prefix = "" if selector.upper() == "ALL" else selector.upper()
        return [rule for rule in self.rules if rule.code.startswith(prefix) and (include_opt_in or not rule.opt_in)]


def render_doc(rule: type[Rule]) -> str:
    """The Markdown page of a rule: docs/rules/<CODE>.md and `fsdplint rule CODE` print this."""
    fix = {
        FixAvailability.NONE: "No automatic fix.",
        FixAvailability.SAFE: "Safe fix: applied by `--fix`.",
        FixAvailability.UNSAFE: "Unsafe fix: applied by `--fix --unsafe-fixes`.",
        FixAvailability.SOMETIMES_SAFE: "Fix: safe for some findings, unsafe for others (see Fix safety).",
    }[rule.fix_availability]
    opt_in = f"Opt-in: runs only when selected by its code (`--select {rule.code}`); `ALL` and prefixes leave it out.\n\n" if rule.opt_in else ""
    header = (
        f"# {rule.code} {rule.name}\n\n"
        f"{rule.summary}\n\n"
        f"Severity: {rule.severity.value}. {fix}\n\n"
        f"{opt_in}"
    )
    return header + rule.documentation() + "\n"
