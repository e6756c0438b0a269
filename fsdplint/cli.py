"""The `fsdplint` command, following ruff's conventions.

Exit codes: 0 no findings, 1 findings (or, with --diff, fixes to show), 2 usage error, unreadable
path, bad configuration or internal error. Problems go to stderr as one line, never a traceback.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import click

from fsdplint import __version__
from fsdplint.config import ConfigError, Settings, load_settings
from fsdplint.discovery import DiscoveryError, discover
from fsdplint.rule import RuleSet, render_doc
from fsdplint.source import SourceError, decode_source, write_atomically


class _DefaultToCheck(click.Group):
    """`fsdplint PATH` means `fsdplint check PATH`, as with ruff."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h", "--version")):
            args = ["check", *args]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        # Whatever the engine's own isolation misses is one line on stderr and exit 2, never a traceback.
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as error:
            click.echo(f"fsdplint: error: internal error: {type(error).__name__}: {error} (please report it)", err=True)
            sys.exit(2)


@click.group(cls=_DefaultToCheck, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fsdplint")
def main() -> None:
    """fsdplint: find and fix mistakes in PyTorch FSDP training code."""


def _fail(message: str) -> None:
    click.echo(f"fsdplint: error: {message}", err=True)
    sys.exit(2)


def _selectors(values: tuple[str, ...]) -> list[str]:
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def _select_rules(ruleset: RuleSet, settings: Settings, select: list[str], extend_select: list[str], ignore: list[str]):
    chosen: dict[str, type] = {}
    for selector in (select or settings.select) + settings.extend_select + extend_select:
        rules = ruleset.expand(selector)
        if not rules:
            _fail(f"unknown rule selector `{selector}` (see `fsdplint rule --all`)")
        chosen.update((rule.code, rule) for rule in rules)
    for selector in settings.ignore + ignore:
        rules = ruleset.expand(selector)
        if not rules:
            _fail(f"unknown rule selector `{selector}` in ignore (see `fsdplint rule --all`)")
        for rule in rules:
            chosen.pop(rule.code, None)
    return sorted(chosen.values(), key=lambda rule: rule.code)


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--select", multiple=True, help="Rule codes, prefixes (FSDP1) or names to check; default: all.")
@click.option("--extend-select", multiple=True, help="Add rules to the selection.")
@click.option("--ignore", multiple=True, help="Rule codes, prefixes or names to skip.")
@click.option("--fix", is_flag=True, help="Apply safe fixes.")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix or --diff, also apply fixes that may change behaviour.")
@click.option("--diff", is_flag=True, help="Print the fixes as a diff and write nothing; exit 1 if there are any.")
@click.option("--output-format", type=click.Choice(["concise", "full", "json", "github", "sarif"]), default="full", show_default=True)
@click.option("--statistics", is_flag=True, help="Print the number of findings per rule.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("-q", "--quiet", is_flag=True, help="Print the findings only, no summary.")
@click.option("--force-exclude", is_flag=True, help="Apply `exclude` to files named on the command line too (pre-commit).")
@click.option("--stdin-filename", type=click.Path(path_type=Path), help="The name of the file read from `-` (stdin).")
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False), help="A pyproject.toml to read [tool.fsdplint] from.")
def check(paths, select, extend_select, ignore, fix, unsafe_fixes, diff, output_format, statistics, exit_zero, quiet, force_exclude, stdin_filename, config_path) -> None:
    """Check PATHS (files or directories; default: the current directory)."""
    from fsdplint import reporters
    from fsdplint.engine import Engine
    from fsdplint.registry import all_rules

    paths = list(paths) or [Path(".")]
    reading_stdin = any(str(path) == "-" for path in paths)
    try:
        settings = load_settings(config_path, stdin_filename.parent if reading_stdin and stdin_filename else paths[0] if paths[0].exists() else Path.cwd())
    except ConfigError as error:
        _fail(str(error))
    ruleset = all_rules()
    selected = _select_rules(ruleset, settings, _selectors(select), _selectors(extend_select), _selectors(ignore))
    engine = Engine(ruleset, selected, settings)

    stdin_source = None
    if reading_stdin:
        name = stdin_filename or Path("-")
        try:
            stdin_source = decode_source(sys.stdin.buffer.read(), name, str(name))
        except SourceError as error:
            _fail(f"{name}: {error}")
    files = [p for p in paths if str(p) != "-"]
    # A path that does not exist is an error (exit 2), but the paths that do are still checked.
    missing = [p for p in files if not p.exists() and not p.is_symlink()]
    if missing and len(missing) == len(paths):
        _fail("; ".join(f"{p}: no such file or directory" for p in missing))
    for path in missing:
        click.echo(f"fsdplint: error: {path}: no such file or directory", err=True)
    try:
        candidates = discover([p for p in files if p not in missing], settings.exclude, settings.project_root, force_exclude)
    except DiscoveryError as error:
        _fail(str(error))
    sources, problems = engine.read(candidates, stdin_source)
    result = engine.check(sources, problems, fix=fix or diff, unsafe_fixes=unsafe_fixes)

    if diff:
        patches = [
            "".join(difflib.unified_diff(before.text.splitlines(True), after.text.splitlines(True), before.display, after.display))
            for before, after in result.changed()
        ]
        sys.stdout.write("".join(patches))
        if not quiet:
            click.echo(f"Would fix {result.fixes_applied} error{'s' if result.fixes_applied != 1 else ''}.", err=True)
        sys.exit(2 if result.internal_error or missing else 1 if patches else 0)

    unwritten: list[str] = []
    if fix:
        for before, after in result.changed():
            if stdin_source is not None and after.display == stdin_source.display:
                continue
            try:
                write_atomically(after.path, after.encode(after.text))
            except (OSError, UnicodeError) as error:  # the other files are still written and reported
                reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
                click.echo(f"fsdplint: error: {after.display}: cannot write the fix: {reason}", err=True)
                unwritten.append(after.display)
        if unwritten:
            result = engine.unfix(result, unwritten)
        if stdin_source is not None:
            sys.stdout.write(result.sources[stdin_source.display].text)

    out = sys.stderr if fix and stdin_source is not None else sys.stdout
    diagnostics = result.diagnostics
    out.write(reporters.FORMATS[output_format](diagnostics, ruleset))
    if statistics:
        out.write(reporters.statistics(diagnostics))
    if not quiet and output_format in ("concise", "full"):
        click.echo(reporters.summary(diagnostics, result.fixes_applied, unsafe_fixes), file=out, nl=False)
    if result.internal_error or unwritten or missing:
        sys.exit(2)
    sys.exit(0 if exit_zero or not diagnostics else 1)


@main.command()
@click.argument("code", required=False)
@click.option("--all", "show_all", is_flag=True, help="List every rule.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rule(code: str | None, show_all: bool, output_format: str) -> None:
    """Show the documentation of rule CODE (a code or a name), or list every rule with --all."""
    import json

    from fsdplint.registry import all_rules

    ruleset = all_rules()
    if show_all or code is None:
        if output_format == "json":
            click.echo(json.dumps([{"code": r.code, "name": r.name, "summary": r.summary, "severity": r.severity.value, "fix": r.fix_availability.value} for r in ruleset.rules], indent=2))
        else:
            for r in ruleset.rules:
                click.echo(f"{r.code}  {r.name:<36} {r.severity.value:<8} fix: {r.fix_availability.value:<9} {r.summary}")
        return
    found = ruleset.lookup(code)
    if found is None:
        _fail(f"unknown rule `{code}` (see `fsdplint rule --all`)")
    if output_format == "json":
        click.echo(json.dumps({"code": found.code, "name": found.name, "summary": found.summary, "severity": found.severity.value, "fix": found.fix_availability.value, "documentation": found.documentation()}, indent=2))
    else:
        click.echo(render_doc(found), nl=False)


@main.command()
@click.option("--rule", "rules", multiple=True, help="Verify only this rule (repeatable); default: every rule with a verify.toml.")
@click.option("--device", type=click.Choice(["cpu", "cuda", "auto"]), default="auto", show_default=True, help="auto: cuda if available.")
@click.option("--nproc", type=click.IntRange(min=1), help="Ranks per run (default: 2 on CPU, one per GPU on CUDA).")
@click.option("--timeout", type=click.FloatRange(min=1), default=180.0, show_default=True, help="Wall-clock limit of one script run, in seconds.")
@click.option("--report", "report_path", type=click.Path(path_type=Path, dir_okay=False), help="Also write PATH.json and PATH.md.")
@click.option("--fixtures", type=click.Path(path_type=Path, file_okay=False, exists=True), help="Fixtures folder (default: the checkout's tests/fixtures).")
@click.option("--torchrun-arg", "torchrun_args", multiple=True, help="Passed to torchrun instead of --standalone, e.g. --torchrun-arg=--nnodes=2 (repeatable).")
def verify(rules, device, nproc, timeout, report_path, fixtures, torchrun_args) -> None:
    """Run each rule's bad script and fsdplint's fix of it under torchrun (needs the verify extra)."""
    try:
        import torch
    except ImportError:
        _fail("`fsdplint verify` needs torch: pip install 'fsdplint[verify]'")
    # Imported here, not at the top: `fsdplint check` must never import torch.
    from fsdplint import harness

    try:
        fixtures = fixtures or harness.default_fixtures()
        cases = harness.load_cases(fixtures, _selectors(rules))
        plan = harness.device_plan(device, nproc)
    except harness.VerifyError as error:
        _fail(str(error))
    click.echo(f"Verifying {len(cases)} rule(s) from {fixtures} on {', '.join(f'{d} x {n}' for d, n in plan)} (torch {torch.__version__})")
    click.echo(harness.TABLE_HEADER)
    report = harness.verify_all(cases, plan, fixtures, timeout, torchrun_args, lambda row: click.echo(harness.format_row(row)))
    click.echo(harness.summary(report))
    if report_path:
        for written in harness.write_report(report, report_path):
            click.echo(f"wrote {written}")
    sys.exit(0 if report.passed else 1)
