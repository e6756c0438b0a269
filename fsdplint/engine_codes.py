"""Codes the engine itself reports: input it cannot check, and `# noqa` comments that do nothing.

They are rules in every other respect (selectable, documented, shown by `fsdplint rule`), but their
findings come from the engine, not from a check over the semantic model.
"""

from __future__ import annotations

from fsdplint.rule import Rule, Severity


class InvalidSyntax(Rule):
    """
    ## What it does
    Reports a file that is not valid Python, at the place the parser stopped.

    ## Why is this bad?
    fsdplint cannot check a file it cannot parse, and neither can Python run it.

    ## Example
    ```python
    fully_shard(model
    ```

    ## Use instead
    ```python
    fully_shard(model)
    ```

    ## Fix safety
    No fix.

    ## References
    - [Python grammar](https://docs.python.org/3/reference/grammar.html)
    """

    code = "FSDP001"
    name = "invalid-syntax"
    summary = "The file is not valid Python and was not checked"
    engine_only = True


class UnreadableFile(Rule):
    """
    ## What it does
    Reports a file that cannot be read as Python source: binary content, bytes that are not valid
    in the file's encoding, or a read error; a file with an FSDP token that is too large to analyze
    (over 1,000,000 characters: parsing it would take minutes and gigabytes); and valid Python that
    LibCST, the parser fsdplint uses, cannot parse (a line continuation at the very end of the file).

    ## Why is this bad?
    The file was not checked. A `.py` file that Python cannot decode does not run either.

    ## Example
    A file saved as Latin-1 with no coding cookie, containing `é`.

    ## Use instead
    Save it as UTF-8, or declare its encoding with `# -*- coding: latin-1 -*-` on the first line.

    ## Fix safety
    No fix.

    ## References
    - [PEP 263](https://peps.python.org/pep-0263/)
    """

    code = "FSDP002"
    name = "unreadable-file"
    summary = "The file cannot be read as Python source and was not checked"
    engine_only = True


class UnusedNoqa(Rule):
    """
    ## What it does
    Reports a `# noqa: FSDP...` comment that suppresses none of the fsdplint codes it names.

    ## Why is this bad?
    A stale suppression hides the next real finding on that line.

    ## Example
    ```python
    out = model(x)  # noqa: FSDP103
    ```

    ## Use instead
    ```python
    out = model(x)
    ```

    ## Fix safety
    No fix.

    ## References
    - [ruff RUF100](https://docs.astral.sh/ruff/rules/unused-noqa/)
    """

    code = "FSDP003"
    name = "unused-noqa"
    summary = "`# noqa` names fsdplint codes that report nothing on this line"
    severity = Severity.WARNING
    engine_only = True


class UnknownNoqaCode(Rule):
    """
    ## What it does
    Reports an `FSDP` code in a `# noqa` comment that is not an fsdplint code.

    ## Why is this bad?
    A mistyped code suppresses nothing, so the finding it meant to silence still fails the run,
    or a later rename leaves the comment meaningless.

    ## Example
    ```python
    out = model.forward(x)  # noqa: FSDP13
    ```

    ## Use instead
    ```python
    out = model.forward(x)  # noqa: FSDP103
    ```

    ## Fix safety
    No fix.

    ## References
    - `fsdplint rule --all` lists every code.
    """

    code = "FSDP004"
    name = "unknown-noqa-code"
    summary = "`# noqa` names a code fsdplint does not have"
    severity = Severity.WARNING
    engine_only = True


class FixFailed(Rule):
    """
    ## What it does
    Reports a fix that fsdplint dropped because the source it produced would not parse.

    ## Why is this bad?
    It is a bug in fsdplint; the file was left as it was. Please report it with the file.

    ## Example
    Any finding whose fix could not be applied.

    ## Use instead
    Apply the change the original finding describes by hand.

    ## Fix safety
    No fix.

    ## References
    - The finding this fix belonged to.
    """

    code = "FSDP005"
    name = "fix-failed"
    summary = "A fix was dropped because its output would not parse"
    engine_only = True


class AnalysisBudgetExhausted(Rule):
    """
    ## What it does
    Reports a function (or module body) whose analysis ran past its work budget: the calls it makes,
    followed into the functions they reach, add up to more than the semantic model walks for one
    function. What the model knows of it is then unknown, and no rule reports on it. The files
    analyzed together have a budget too: once it is spent, the bodies not yet analyzed are unknown,
    told once per file (files that import FSDP are analyzed first).

    It is shown only with `-v`, on stderr, and never changes the exit code.

    ## Why is this bad?
    The budget keeps every run short on any input; a function past it is not checked.

    ## Example
    A `main` that calls hundreds of helpers, each calling more.

    ## Use instead
    Nothing to change in the code; check the function's parts where they are defined.

    ## Fix safety
    No fix.

    ## References
    - The function named in the message.
    """

    code = "FSDP006"
    name = "analysis-budget-exhausted"
    summary = "A function's analysis ran past its work budget and was not checked"
    severity = Severity.WARNING
    engine_only = True


class InternalError(Rule):
    """
    ## What it does
    Reports that a rule, the semantic model or a fix raised an unexpected error on this file; the
    message names the rule (or stage) and where in fsdplint it failed. The other rules still ran on
    this file, and every rule on the other files.

    ## Why is this bad?
    It is a bug in fsdplint: that rule's findings (or that fix) for this file are missing. The run
    exits 2.

    ## Example
    Any input that makes a rule fail.

    ## Use instead
    Report the file and the message; ignore the rule with `--ignore CODE` meanwhile.

    ## Fix safety
    No fix.

    ## References
    - The rule named in the message.
    """

    code = "FSDP009"
    name = "internal-error"
    summary = "A rule failed with an internal error"
    engine_only = True


ENGINE_CODES = [InvalidSyntax, UnreadableFile, UnusedNoqa, UnknownNoqaCode, FixFailed, AnalysisBudgetExhausted, InternalError]
