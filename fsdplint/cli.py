"""The `fsdplint` command, following ruff's conventions.

Exit codes: 0 no findings, 1 findings (or, with --diff, fixes to show), 2 usage error, unreadable
path, bad configuration or internal error. Problems go to stderr as one line, never a traceback.
"""

from __future__ import annotations

import difflib
import sys
import time
from pathlib import Path

import click

from fsdplint import __version__, install_commands
from fsdplint.config import ConfigError, load_settings, select_rules
from fsdplint.discovery import DiscoveryError, discover
from fsdplint.rule import render_doc
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


def _install_hint(extra: str) -> str:
    from_repository, in_checkout = install_commands(extra)
    return f"{from_repository} (in a checkout of fsdplint: {in_checkout})"


def _selectors(values: tuple[str, ...]) -> list[str]:
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--select", multiple=True, help="Rule codes, prefixes (FSDP1) or names to check; default: all.")
@click.option("--extend-select", multiple=True, help="Add rules to the selection.")
@click.option("--ignore", multiple=True, help="Rule codes, prefixes or names to skip.")
@click.option("--fix", is_flag=True, help="Apply safe fixes.")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix or --diff, also apply fixes that may change behaviour.")
@click.option("--diff", is_flag=True, help="Print the fixes as a diff and write nothing; exit 1 if there are any.")
@click.option("--output-format", type=click.Choice(["concise", "full", "json", "github", "sarif", "junit", "gitlab", "pylint"]), default="full", show_default=True)
@click.option("--show-fixes", is_flag=True, help="Show each fix as a diff under its finding (full format), and list what --fix fixed.")
@click.option("--statistics", is_flag=True, help="Print the number of findings per rule.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("-q", "--quiet", is_flag=True, help="Print the findings only, no summary.")
@click.option("--force-exclude", is_flag=True, help="Apply `exclude` to files named on the command line too (pre-commit).")
@click.option("--stdin-filename", type=click.Path(path_type=Path), help="The name of the file read from `-` (stdin).")
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False), help="A pyproject.toml to read [tool.fsdplint] from.")
@click.option("--no-cache", is_flag=True, envvar="FSDPLINT_NO_CACHE", help="Read and analyze every file; neither read nor write the cache.")
@click.option("--cache-dir", type=click.Path(path_type=Path, file_okay=False), envvar="FSDPLINT_CACHE_DIR", help="Cache folder (default: .fsdplint_cache in the project root).")
@click.option("-v", "--verbose", is_flag=True, help="Also print, to stderr, how many files were read, parsed and served from the cache.")
def check(paths, select, extend_select, ignore, fix, unsafe_fixes, diff, output_format, show_fixes, statistics, exit_zero, quiet, force_exclude, stdin_filename, config_path, no_cache, cache_dir, verbose) -> None:
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
    try:
        selected = select_rules(ruleset, settings, _selectors(select), _selectors(extend_select), _selectors(ignore))
    except ConfigError as error:
        _fail(str(error))
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
    started = time.perf_counter()
    if fix or diff or show_fixes or no_cache:  # fixes need the trees, which the cache does not keep
        sources, problems = engine.read(candidates, stdin_source)
        result = engine.check(sources, problems, fix=fix or diff, unsafe_fixes=unsafe_fixes)
    else:
        from fsdplint.cache import Cache

        cache = Cache(cache_dir or settings.project_root / ".fsdplint_cache", engine.index_key())
        result = engine.check_cached(candidates, stdin_source, cache)
    if verbose:
        click.echo(f"fsdplint: {len(candidates) + (stdin_source is not None)} files: {result.files_read} read, {result.files_parsed} parsed, "
                   f"{result.files_cached} served from the cache, in {time.perf_counter() - started:.3f} s", err=True)

    if diff:
        patches = _patches(result)
        sys.stdout.write("".join(patches))
        if not quiet:
            click.echo(f"Would fix {result.fixes_applied} error{'s' if result.fixes_applied != 1 else ''}.", err=True)
        sys.exit(2 if result.internal_error or missing else 1 if patches else 0)

    unwritten: list[str] = []
    if fix:
        unwritten = _write(result, skip=stdin_source.display if stdin_source is not None else None)
        if unwritten:
            result = engine.unfix(result, unwritten)
        if stdin_source is not None:
            sys.stdout.write(result.sources[stdin_source.display].text)

    out = sys.stderr if fix and stdin_source is not None else sys.stdout
    diagnostics = result.diagnostics
    human = output_format in reporters.HUMAN_FORMATS
    options = reporters.RenderOptions(color=human and reporters.color_enabled(out), show_fixes=show_fixes, unsafe_fixes=unsafe_fixes)
    report = reporters.FORMATS[output_format](diagnostics, ruleset, options)
    out.write(report)
    if output_format == "full" and report and (statistics or not quiet):
        out.write("\n")  # the last finding's block ends, as the ones before it do
    if statistics:
        out.write(reporters.statistics(diagnostics, options))
    if not quiet and human:
        if show_fixes and result.fixed:
            out.write(reporters.fixed_listing(result.fixed))
        out.write(reporters.summary(diagnostics, result.fixes_applied, options))
    if result.internal_error or unwritten or missing:
        sys.exit(2)
    sys.exit(0 if exit_zero or not diagnostics else 1)


def _patches(result) -> list[str]:
    """One unified diff per changed file."""
    return [
        "".join(difflib.unified_diff(before.text.splitlines(True), after.text.splitlines(True), before.display, after.display))
        for before, after in result.changed()
    ]


def _write(result, skip: str | None = None) -> list[str]:
    """Write every changed file (but `skip`, the stdin source) in place, atomically. A file that cannot
    be written is reported and returned; the others are still written."""
    unwritten = []
    for _before, after in result.changed():
        if after.display == skip:
            continue
        try:
            write_atomically(after.path, after.encode(after.text))
        except (OSError, UnicodeError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            click.echo(f"fsdplint: error: {after.display}: cannot write the fix: {reason}", err=True)
            unwritten.append(after.display)
    return unwritten


MIGRATION = "FSDP501"


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--write", is_flag=True, help="Write the migrated files (default: print the diff).")
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False), help="A pyproject.toml to read [tool.fsdplint] from.")
def migrate(paths, write, config_path) -> None:
    """Migrate FSDP1 (FullyShardedDataParallel) code in PATHS to FSDP2 (fully_shard).

    The same as `fsdplint check --select FSDP501 --fix --unsafe-fixes` (or `--diff`). Prints the
    diff, or writes it with --write, then lists what is left for a person. Exit 0 when there is
    nothing left to migrate, 1 when there is (a diff to apply, or wraps to migrate by hand).
    """
    from fsdplint import reporters
    from fsdplint.engine import Engine
    from fsdplint.registry import all_rules

    paths = list(paths) or [Path(".")]
    try:
        settings = load_settings(config_path, paths[0] if paths[0].exists() else Path.cwd())
        candidates = discover(paths, settings.exclude, settings.project_root, force_exclude=False)
    except (ConfigError, DiscoveryError) as error:
        _fail(str(error))
    ruleset = all_rules()
    engine = Engine(ruleset, [ruleset.by_code[MIGRATION]], settings)
    sources, problems = engine.read(candidates)
    result = engine.check(sources, problems, fix=True, unsafe_fixes=True)
    patches = _patches(result)
    unwritten = _write(result) if write else []
    if not write:
        sys.stdout.write("".join(patches))
    left = result.diagnostics  # after the fixes: what no fix could migrate
    sys.stderr.write(reporters.FORMATS["full"](left, ruleset))
    done = "Migrated" if write else "Would migrate"
    click.echo(f"{done} {len(patches)} file{'s' if len(patches) != 1 else ''}; {len(left)} left for a person.", err=True)
    if result.internal_error or unwritten:
        sys.exit(2)
    sys.exit(1 if left or (patches and not write) else 0)


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
@click.option("--fixtures", type=click.Path(path_type=Path, file_okay=False, exists=True), help="Fixtures folder (default: the fixtures installed with fsdplint).")
@click.option("--torchrun-arg", "torchrun_args", multiple=True, help="Passed to torchrun instead of --standalone, e.g. --torchrun-arg=--nnodes=2 (repeatable).")
def verify(rules, device, nproc, timeout, report_path, fixtures, torchrun_args) -> None:
    """Run each rule's bad script and fsdplint's fix of it under torchrun (needs the verify extra)."""
    try:
        import torch
    except ImportError:
        _fail(f"`fsdplint verify` needs torch: {_install_hint('verify')}")
    # Imported here, not at the top: `fsdplint check` must never import torch.
    from fsdplint import harness

    try:
        fixtures = fixtures or harness.default_fixtures()
        cases = harness.load_cases(fixtures, _selectors(rules))
        plan = harness.device_plan(device, nproc)
    except harness.VerifyError as error:
        _fail(str(error))
    click.echo(f"Verifying {len(cases)} case(s) from {fixtures} on {', '.join(f'{d} x {n}' for d, n in plan)} (torch {torch.__version__})")
    click.echo(harness.TABLE_HEADER)
    report = harness.verify_all(cases, plan, fixtures, timeout, torchrun_args, lambda row: click.echo(harness.format_row(row)))
    click.echo(harness.summary(report))
    if report_path:
        for written in harness.write_report(report, report_path):
            click.echo(f"wrote {written}")
    sys.exit(0 if report.passed else 1)


@main.command()
def server() -> None:
    """Run the language server on stdin/stdout, for editors (needs the lsp extra)."""
    try:
        from fsdplint.server import serve
    except ImportError as error:
        if (error.name or "").split(".")[0] not in ("pygls", "lsprotocol"):
            raise
        _fail(f"`fsdplint server` needs pygls: {_install_hint('lsp')}")
    serve()
