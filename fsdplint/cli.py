"""The `fsdplint` command, following ruff's conventions.

Exit codes: 0 no findings, 1 findings (or, with --diff, fixes to show; with --exit-non-zero-on-fix, a
fix applied; never findings left with --fix-only), 2 usage error, unreadable path, bad configuration
or internal error. Problems go to stderr as one line, never a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import enum
import json
import os
import sys
import time
from pathlib import Path
from typing import NoReturn, TextIO

import click

from fsdplint import __version__, install_commands
from fsdplint.config import ConfigError, load_settings, select_rules
from fsdplint.discovery import DiscoveryError, discover
from fsdplint.rule import Rule, render_doc
from fsdplint.source import SourceError, SourceFile, decode_source, write_atomically


class HelpFormat(str, enum.Enum):
    """How `rule` and `version` print, as ruff's `--output-format` for them."""

    TEXT = "text"
    JSON = "json"


HELP_FORMATS = click.Choice([format.value for format in HelpFormat])
GROUP_OPTIONS = ("--help", "-h", "--version", "-V")


SIGPIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away


class _DefaultToCheck(click.Group):
    """`fsdplint PATH` means `fsdplint check PATH`, as with ruff."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in GROUP_OPTIONS):
            if args:
                _refuse_mistyped_command(args[0], list(self.commands))
            args = ["check", *args]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        # Whatever the engine's own isolation misses is one line on stderr and exit 2, never a traceback.
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            # The reader closed the pipe (`fsdplint . | head`): stop quietly, as a process that SIGPIPE
            # ends does. Standard output goes to /dev/null so that the interpreter's last flush cannot fail too.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(SIGPIPE_EXIT)
        except Exception as error:
            click.echo(f"fsdplint: error: internal error: {type(error).__name__}: {error} (please report it)", err=True)
            sys.exit(2)


def _refuse_mistyped_command(word: str, commands: list[str]) -> None:
    """`fsdplint chek` is a mistyped command, not a path to check: name the command it is close to.
    A word that looks like a path (`chek.py`, `src/`) or exists is left to `check`."""
    if word.startswith("-") or any(mark in word for mark in "./\\") or Path(word).exists():
        return
    close = difflib.get_close_matches(word, commands, n=1)
    if close:
        _fail(f"`{word}` is neither a command nor an existing path; did you mean `fsdplint {close[0]}`?")


@click.group(cls=_DefaultToCheck, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="fsdplint", message="%(prog)s %(version)s")
def main() -> None:
    """fsdplint: find and fix mistakes in PyTorch FSDP training code."""


def _fail(message: str) -> NoReturn:
    click.echo(f"fsdplint: error: {message}", err=True)
    sys.exit(2)


def _install_hint(extra: str) -> str:
    from_repository, in_checkout = install_commands(extra)
    return f"{from_repository} (in a checkout of fsdplint: {in_checkout})"


def _comma_separated(values: tuple[str, ...]) -> list[str]:
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def _errors(count: int) -> str:
    return f"{count} error{'s' if count != 1 else ''}"


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--select", multiple=True, help="Rule codes, prefixes (FSDP1) or names to check; default: all.")
@click.option("--extend-select", multiple=True, help="Add rules to the selection.")
@click.option("--ignore", multiple=True, help="Rule codes, prefixes or names to skip.")
@click.option("--fix", is_flag=True, help="Apply safe fixes.")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix, --fix-only or --diff, also apply fixes that may change behaviour.")
@click.option("--fix-only", is_flag=True, help="Apply safe fixes (implies --fix) and report only how many; exit 0 unless --exit-non-zero-on-fix.")
@click.option("--exit-non-zero-on-fix", is_flag=True, help="Exit 1 when a fix was applied, even if no finding remains.")
@click.option("--diff", is_flag=True, help="Print the fixes as a diff and write nothing; exit 1 if there are any.")
@click.option("--add-noqa", is_flag=True, help="Add `# noqa: CODE` to each line with a finding, and change nothing else.")
@click.option("--output-format", type=click.Choice(["concise", "full", "json", "github", "sarif", "junit", "gitlab", "pylint"]), default="full", show_default=True)
@click.option("--output-file", type=click.Path(path_type=Path, dir_okay=False), help="Write the report to this file instead of stdout.")
@click.option("--show-fixes", is_flag=True, help="Show each fix as a diff under its finding (full format), and list what --fix fixed.")
@click.option("--statistics", is_flag=True, help="Print the number of findings per rule.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("-q", "--quiet", is_flag=True, help="Print the findings only: no summary, no progress.")
@click.option("--exclude", multiple=True, help="Patterns of files and folders to skip, instead of the configured `exclude`.")
@click.option("--extend-exclude", multiple=True, help="Patterns of files and folders to skip besides `exclude`.")
@click.option("--force-exclude", is_flag=True, help="Apply `exclude` to files named on the command line too (pre-commit).")
@click.option("--show-files", is_flag=True, help="List the files a check would read, and exit.")
@click.option("--show-settings", is_flag=True, help="Show the settings that apply to the first file to check, and exit.")
@click.option("--stdin-filename", type=click.Path(path_type=Path), help="The name of the file read from `-` (stdin).")
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False), help="A pyproject.toml to read [tool.fsdplint] from.")
@click.option("--no-cache", is_flag=True, envvar="FSDPLINT_NO_CACHE", help="Read and analyze every file; neither read nor write the cache.")
@click.option("--cache-dir", type=click.Path(path_type=Path, file_okay=False), envvar="FSDPLINT_CACHE_DIR", help="Cache folder (default: .fsdplint_cache in the project root).")
@click.option("-v", "--verbose", is_flag=True, help="Also print, to stderr, how many files were read, parsed and served from the cache.")
def check(paths, select, extend_select, ignore, fix, unsafe_fixes, fix_only, exit_non_zero_on_fix, diff, add_noqa, output_format, output_file,
          show_fixes, statistics, exit_zero, quiet, exclude, extend_exclude, force_exclude, show_files, show_settings, stdin_filename,
          config_path, no_cache, cache_dir, verbose) -> None:
    """Check PATHS (files or directories; default: the current directory)."""
    from fsdplint import reporters
    from fsdplint.engine import Engine
    from fsdplint.progress import ProgressLine
    from fsdplint.registry import all_rules

    paths = list(paths) or [Path(".")]
    select, extend_select, ignore = _comma_separated(select), _comma_separated(extend_select), _comma_separated(ignore)
    reading_stdin = any(str(path) == "-" for path in paths)
    fixing = fix or fix_only
    if add_noqa and (fixing or diff):
        _fail("--add-noqa writes only `# noqa` comments: it cannot be combined with --fix, --fix-only or --diff")
    if add_noqa and reading_stdin:
        _fail("--add-noqa writes the files it checks, so it cannot read stdin (`-`)")
    try:
        settings = load_settings(config_path, stdin_filename.parent if reading_stdin and stdin_filename else paths[0] if paths[0].exists() else Path.cwd())
    except ConfigError as error:
        _fail(str(error))
    if exclude:
        settings.exclude = _comma_separated(exclude)
    settings.extend_exclude += _comma_separated(extend_exclude)
    ruleset = all_rules()
    try:
        selected = select_rules(ruleset, settings, select, extend_select, ignore)
    except ConfigError as error:
        _fail(str(error))
    out = _open_report(output_file) if output_file else sys.stderr if fixing and reading_stdin else sys.stdout

    stdin_source = None
    if reading_stdin and not (show_files or show_settings):
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
        candidates = discover([p for p in files if p not in missing], settings.excluded, settings.project_root, force_exclude)
    except DiscoveryError as error:
        _fail(str(error))
    if show_settings:
        if not candidates:
            _fail("no Python files found under the given paths")
        out.write(_settings_report(candidates, settings, selected, select, extend_select, ignore))
        sys.exit(2 if missing else 0)
    if show_files:
        if not candidates:
            click.echo("fsdplint: warning: no Python files found under the given paths", err=True)
        out.write("".join(f"{path}\n" for path in sorted(os.path.abspath(candidate.path) for candidate in candidates)))
        sys.exit(2 if missing else 0)

    # Progress is for a person waiting at a terminal: never in a pipe, a log or with -q.
    progress = ProgressLine(sys.stderr) if not quiet and sys.stderr.isatty() else None
    engine = Engine(ruleset, selected, settings, progress=progress.update if progress else None)
    started = time.perf_counter()
    with progress or contextlib.nullcontext():
        if add_noqa or fixing or diff or show_fixes or no_cache:  # these need the sources and trees, which the cache does not keep
            sources, problems = engine.read(candidates, stdin_source)
            result = engine.check(sources, problems, fix=fixing or diff, unsafe_fixes=unsafe_fixes)
        else:
            from fsdplint.cache import Cache

            cache = Cache(cache_dir or settings.project_root / ".fsdplint_cache", engine.index_key())
            result = engine.check_cached(candidates, stdin_source, cache)
    if verbose:
        click.echo(f"fsdplint: {len(candidates) + (stdin_source is not None)} files: {result.files_read} read, {result.files_parsed} parsed, "
                   f"{result.files_cached} served from the cache, in {time.perf_counter() - started:.3f} s", err=True)
        for note in result.notes:
            click.echo(f"fsdplint: note: {note.path}:{note.line}: {note.message}", err=True)

    if add_noqa:
        changes, added = _with_noqa(result)
        unwritten = _write(changes, what="the `# noqa` comments")
        if added and not quiet:
            click.echo(f"Added {added} noqa directive{'s' if added != 1 else ''}.", err=True)
        sys.exit(2 if result.internal_error or unwritten or missing else 0)

    if diff:
        patches = _patches(result)
        out.write("".join(patches))
        if not quiet:
            click.echo(f"Would fix {_errors(result.fixes_applied)}.", err=True)
        sys.exit(2 if result.internal_error or missing else 1 if patches else 0)

    unwritten: list[str] = []
    if fixing:
        unwritten = _write(result.changed(), skip=stdin_source.display if stdin_source is not None else None)
        if unwritten:
            result = engine.unfix(result, unwritten)
        if stdin_source is not None:
            sys.stdout.write(result.sources[stdin_source.display].text)

    diagnostics = result.diagnostics
    human = output_format in reporters.HUMAN_FORMATS
    # A report written to a file is never colored: it is read later, not by this terminal.
    options = reporters.RenderOptions(color=human and not output_file and reporters.color_enabled(out), show_fixes=show_fixes, unsafe_fixes=unsafe_fixes)
    if not fix_only:  # --fix-only reports what it fixed, not what is left
        report = reporters.FORMATS[output_format](diagnostics, ruleset, options)
        out.write(report)
        if output_format == "full" and report and (statistics or not quiet):
            out.write("\n")  # the last finding's block ends, as the ones before it do
    if statistics:
        out.write(reporters.statistics(diagnostics, options))
    if not quiet and human:
        if show_fixes and result.fixed:
            out.write(reporters.fixed_listing(result.fixed))
        if not fix_only:
            out.write(reporters.summary(diagnostics, result.fixes_applied, options))
        elif result.fixes_applied:
            out.write(f"Fixed {_errors(result.fixes_applied)}.\n")
    if result.internal_error or unwritten or missing:
        sys.exit(2)
    sys.exit(_exit_status(bool(diagnostics), bool(result.fixes_applied), fix_only, exit_non_zero_on_fix, exit_zero))


def _exit_status(findings: bool, fixed: bool, fix_only: bool, exit_non_zero_on_fix: bool, exit_zero: bool) -> int:
    """Ruff's: 1 for findings left (never with --fix-only), or for any fix with --exit-non-zero-on-fix."""
    if exit_zero:
        return 0
    if exit_non_zero_on_fix and fixed:
        return 1
    return 1 if findings and not fix_only else 0


def _open_report(path: Path) -> TextIO:
    """The output file, created with its folders as ruff does, and closed when the command ends."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        stream = path.open("w", encoding="utf-8")
    except OSError as error:
        _fail(f"{path}: cannot write the report: {error.strerror or error}")
    return click.get_current_context().with_resource(stream)


def _settings_report(candidates, settings, selected, select: list[str], extend_select: list[str], ignore: list[str]) -> str:
    """Ruff's `--show-settings`: the file the settings are for, where they come from, and the settings
    after the command line's, in pyproject.toml's spelling; `rules` is what will run."""
    from fsdplint.discovery import DEFAULT_EXCLUDES

    first = min(os.path.abspath(candidate.path) for candidate in candidates)
    lines = [f"Resolved settings for: {json.dumps(first)}"]
    if settings.config_path:
        lines.append(f"Settings path: {json.dumps(str(settings.config_path.resolve()))}")
    per_file = ", ".join(f"{json.dumps(pattern)} = {json.dumps(codes)}" for pattern, codes in settings.per_file_ignores.items())
    lines += [
        "",
        f"project-root = {json.dumps(str(settings.project_root))}",
        f"select = {json.dumps(select or settings.select)}",
        f"extend-select = {json.dumps(settings.extend_select + extend_select)}",
        f"ignore = {json.dumps(settings.ignore + ignore)}",
        f"exclude = {json.dumps(settings.exclude)}",
        f"extend-exclude = {json.dumps(settings.extend_exclude)}",
        f"default-exclude = {json.dumps(DEFAULT_EXCLUDES)}",
        f"per-file-ignores = {{ {per_file} }}" if per_file else "per-file-ignores = {}",
        "rules = [",
        *(f"    {json.dumps(rule.code)},  # {rule.name}" for rule in selected),
        "]",
    ]
    return "\n".join(lines) + "\n"


def _with_noqa(result) -> tuple[list[tuple[SourceFile, SourceFile]], int]:
    """Each file with findings, before and after `# noqa` comments for them, and how many lines got one."""
    from fsdplint.engine import takes_noqa
    from fsdplint.noqa import add_noqa

    codes: dict[str, dict[int, set[str]]] = {}
    for diagnostic in result.diagnostics:
        if takes_noqa(diagnostic.code):
            codes.setdefault(diagnostic.path, {}).setdefault(diagnostic.line, set()).add(diagnostic.code)
    changes = []
    added = 0
    for path, codes_by_line in codes.items():
        before = result.sources[path]
        text, lines = add_noqa(before.text, codes_by_line)
        if lines:
            changes.append((before, dataclasses.replace(before, text=text)))
            added += lines
    return changes, added


def _patches(result) -> list[str]:
    """One unified diff per changed file."""
    return [
        "".join(difflib.unified_diff(before.text.splitlines(True), after.text.splitlines(True), before.display, after.display))
        for before, after in result.changed()
    ]


def _write(changes: list[tuple[SourceFile, SourceFile]], skip: str | None = None, what: str = "the fix") -> list[str]:
    """Write each changed file (but `skip`, the stdin source) in place, atomically, in its own encoding
    and line endings. A file that cannot be written is reported and returned; the others are still written."""
    unwritten = []
    for _before, after in changes:
        if after.display == skip:
            continue
        try:
            write_atomically(after.path, after.encode(after.text))
        except (OSError, UnicodeError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
            click.echo(f"fsdplint: error: {after.display}: cannot write {what}: {reason}", err=True)
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
        candidates = discover(paths, settings.excluded, settings.project_root, force_exclude=False)
    except (ConfigError, DiscoveryError) as error:
        _fail(str(error))
    ruleset = all_rules()
    engine = Engine(ruleset, [ruleset.by_code[MIGRATION]], settings)
    sources, problems = engine.read(candidates)
    result = engine.check(sources, problems, fix=True, unsafe_fixes=True)
    patches = _patches(result)
    unwritten = _write(result.changed()) if write else []
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
@click.option("--all", "show_all", is_flag=True, help="Show every rule's documentation.")
@click.option("--output-format", type=HELP_FORMATS, default=HelpFormat.TEXT.value, show_default=True)
def rule(code: str | None, show_all: bool, output_format: str) -> None:
    """Show the documentation of rule CODE (a code or a name), every rule's with --all, or with
    neither a table of every rule."""
    from fsdplint.registry import all_rules

    ruleset = all_rules()
    if code is not None and show_all:
        _fail("give a rule or --all, not both")
    if code is None:
        rules = ruleset.rules
    else:
        found = ruleset.lookup(code)
        if found is None:
            _fail(f"unknown rule `{code}` (see `fsdplint rule`)")
        rules = [found]
    if HelpFormat(output_format) is HelpFormat.JSON:
        documents = [_rule_document(r) for r in rules]
        click.echo(json.dumps(documents[0] if code else documents, indent=2))
    elif code or show_all:
        click.echo("\n".join(render_doc(r) for r in rules), nl=False)
    else:
        click.echo(_rule_table(rules), nl=False)


def _rule_document(rule: type[Rule]) -> dict:
    return {"code": rule.code, "name": rule.name, "summary": rule.summary, "severity": rule.severity.value,
            "fix": rule.fix_availability.value, "documentation": rule.documentation()}


def _rule_table(rules: list[type[Rule]]) -> str:
    """One row per rule, each column as wide as its widest cell."""
    rows = [("code", "name", "severity", "fix", "summary")]
    rows += [(r.code, r.name, r.severity.value, r.fix_availability.value, r.summary) for r in rules]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    return "".join("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths)), row[-1]]) + "\n" for row in rows)


@main.command()
@click.option("--output-format", type=HELP_FORMATS, default=HelpFormat.TEXT.value, show_default=True)
def version(output_format: str) -> None:
    """Show fsdplint's version (as `--version` does)."""
    if HelpFormat(output_format) is HelpFormat.JSON:
        click.echo(json.dumps({"version": __version__}, indent=2))
    else:
        click.echo(f"fsdplint {__version__}")


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
        cases = harness.load_cases(fixtures, _comma_separated(rules))
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
