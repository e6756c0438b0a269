"""The pipeline: read -> text prefilter -> parse -> one semantic model -> rules -> diagnostics -> fixes.

Nothing here imports libcst at module level: a run in which no file holds a trigger token never pays
for it.
"""

from __future__ import annotations

import ast
import fnmatch
import gc
import os
import traceback
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from fsdplint.cache import Cache, FileFacts, code_fingerprint, content_hash, digest
from fsdplint.config import Settings
from fsdplint.distributed import DISTRIBUTED_MARKERS
from fsdplint.edits import Position, Range, TextEdit, text_edits
from fsdplint.noqa import NOQA_TOKEN, OUR_PREFIX, Suppressions, may_hold_our_noqa, parse_suppressions
from fsdplint.plan import Plan, Unit, make_plan, module_name_for
from fsdplint.rule import Finding, Related, Rule, RuleSet, Severity
from fsdplint.source import SourceError, SourceFile, decode_source, split_lines

if TYPE_CHECKING:
    from fsdplint.discovery import Candidate
    from fsdplint.fixes import Fix
    from fsdplint.model import FileModel, Flow, Program, UnparsedFile

MAX_FIX_PASSES = 10
# LibCST needs ~10 s and 500 MB for 1 MB of Python and grows faster than linearly (4 MB: minutes, GBs);
# hand-written training code is far smaller. A larger file holding a trigger token is reported, not parsed.
MAX_PARSE_CHARS = 1_000_000
# A file (or function) that was not checked is always said; FSDP006 only under -v, as a note.
ALWAYS_ON = {"FSDP001", "FSDP002", "FSDP006", "FSDP009"}
NOTE_CODES = {"FSDP006"}  # kept out of the findings: Result.notes
NOQA_PROBLEMS = {"FSDP003", "FSDP004"}  # reported about `# noqa` comments, so no `# noqa` silences them
# Below this much source to parse, starting worker processes (each imports libcst) costs more than it
# saves. Measured on 2 cores: the generated 1M-line corpus parses 157 kB in 102 files, 3.5 s in one
# process, 2.6 s with two workers.
POOL_MIN_BYTES = 50_000
# The layout of the cache's file index (its plans' units: paths, parse, callees); a new layout starts a new index.
INDEX_FORMAT = 2


def takes_noqa(code: str) -> bool:
    """Whether a `# noqa` on a finding's line suppresses it (what `--add-noqa` may write)."""
    return code not in ALWAYS_ON and code not in NOQA_PROBLEMS


@dataclass(frozen=True)
class FixSummary:
    """What a report shows of a fix; findings served from the cache or a worker carry this, not the tree edits."""

    message: str
    safe: bool


@dataclass(frozen=True)
class RelatedLocation:
    """Another place a finding involves, resolved: 1-based line and column, ending just past it."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    message: str


@dataclass(eq=False)
class Diagnostic:
    path: str
    line: int  # 1-based
    column: int  # 1-based
    end_line: int
    end_column: int
    code: str
    name: str
    message: str
    severity: Severity
    fix: Fix | FixSummary | None = None
    # The fix alone as edits on the checked text: what JSON, SARIF and the API show, kept where the
    # tree is not (the cache, worker processes). Empty when the fix changes nothing or would not parse.
    edits: tuple[TextEdit, ...] = ()
    source_lines: list[str] = field(default_factory=list)  # the lines line..end_line; none when there is no text to show
    file: FileModel | None = field(default=None, repr=False)
    related: tuple[RelatedLocation, ...] = ()  # where the module was sharded, the calls that led here...

    @property
    def fix_applicability(self) -> str | None:
        if self.fix is None:
            return None
        return "safe" if self.fix.safe else "unsafe"

    def sort_key(self) -> tuple:
        return (self.path, self.line, self.column, self.code)


@dataclass
class Result:
    diagnostics: list[Diagnostic]
    sources: dict[str, SourceFile]  # by display path, as they are after any fix
    original: dict[str, SourceFile]
    files_read: int = 0
    files_parsed: int = 0
    files_cached: int = 0  # files of units whose findings came from the cache
    fixes_by_path: dict[str, int] = field(default_factory=dict)
    fixed: list[Diagnostic] = field(default_factory=list)  # the findings whose fixes were applied
    plan: Plan | None = None
    notes: list[Diagnostic] = field(default_factory=list)  # NOTE_CODES: what was left unchecked, for -v

    def __post_init__(self) -> None:
        self.take_notes()

    def take_notes(self) -> None:
        """Moves the diagnostics of NOTE_CODES from the findings into `notes`."""
        self.notes += [d for d in self.diagnostics if d.code in NOTE_CODES]
        self.diagnostics = [d for d in self.diagnostics if d.code not in NOTE_CODES]

    @property
    def fixes_applied(self) -> int:
        return sum(self.fixes_by_path.values())

    def changed(self) -> list[tuple[SourceFile, SourceFile]]:
        return [(self.original[path], source) for path, source in self.sources.items() if source.text != self.original[path].text]

    @property
    def internal_error(self) -> bool:
        return any(d.code == "FSDP009" for d in self.diagnostics)


class Engine:
    """`prefilter=False` parses every file into one program: the reference the prefilter is tested against.
    `line_noqa=False` leaves `# noqa` comments to the caller (flake8 applies its own). `progress` is
    told (files analyzed, files in all) as an analysis goes."""

    def __init__(self, ruleset: RuleSet, selected: list[type[Rule]], settings: Settings, line_noqa: bool = True,
                 prefilter: bool = True, jobs: int | None = None, progress: Callable[[int, int], None] | None = None) -> None:
        self.ruleset = ruleset
        self.progress = progress or (lambda done, total: None)
        self.settings = settings
        self.line_noqa = line_noqa
        self.prefilter = prefilter
        self.jobs = jobs if jobs is not None else len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.selected_codes = {rule.code for rule in selected} | ALWAYS_ON
        self.rules = [rule() for rule in selected if not rule.engine_only]
        self.triggers = tuple(sorted({token for rule in self.rules for token in rule.trigger_tokens}))
        # Tokens the file index records, for every rule so that one index serves any selection, and the
        # markers that make a file an entry.
        self.watched = tuple(sorted({token for rule in ruleset.rules for token in rule.trigger_tokens} | {OUR_PREFIX} | set(DISTRIBUTED_MARKERS)))
        self._per_file_ignores = [
            (pattern, {rule.code for selector in codes for rule in ruleset.expand(selector, include_opt_in=True)})
            for pattern, codes in settings.per_file_ignores.items()
        ]

    # reading

    def read(self, candidates: Iterable[Candidate], stdin: SourceFile | None = None) -> tuple[dict[str, SourceFile], list[Diagnostic]]:
        sources: dict[str, SourceFile] = {}
        problems: list[Diagnostic] = []
        if stdin is not None:
            sources[stdin.display] = stdin
        for candidate in candidates:
            try:
                sources[candidate.display] = _read(candidate)[0]
            except SourceError as error:
                problems.append(self._file_problem(candidate.display, "FSDP002", str(error), error.line, error.column, error.source_lines))
        return sources, problems

    def check_cached(self, candidates: list[Candidate], stdin: SourceFile | None, cache: Cache) -> Result:
        """`check` without fixes, reading only changed files and analyzing only changed units."""
        index = cache.load_index()
        sources: dict[str, SourceFile] = {}
        facts: dict[str, FileFacts] = {}
        paths: dict[str, Path] = {}
        problems: list[Diagnostic] = []
        if stdin is not None:
            sources[stdin.display] = stdin
            facts[stdin.display] = self._facts(stdin.text, content_hash(stdin.encode(stdin.text)))
            paths[stdin.display] = stdin.path
        for candidate in candidates:
            absolute = os.path.abspath(candidate.path)
            try:
                stat = os.stat(candidate.path)
                known = index.lookup(absolute, stat)
                if known is None:
                    recorded = cache.now_ns()  # stat before read: a later edit changes the signature
                    source, data = _read(candidate)
                    known = self._facts(source.text, content_hash(data))
                    sources[candidate.display] = source
                    index.record(absolute, stat, recorded, known)
            except OSError as error:
                problems.append(self._file_problem(candidate.display, "FSDP002", f"cannot read: {error.strerror or error}"))
                continue
            except SourceError as error:
                problems.append(self._file_problem(candidate.display, "FSDP002", str(error), error.line, error.column, error.source_lines))
                continue
            facts[candidate.display] = known
            paths[candidate.display] = candidate.path

        def text_of(display: str) -> str:
            if display not in sources:
                sources[display] = _read(_Candidate(paths[display], display))[0]
            return sources[display].text

        triggers, markers = set(self.triggers), set(DISTRIBUTED_MARKERS)
        scope = digest(self.triggers, self.prefilter, sorted((display, os.path.abspath(path)) for display, path in paths.items()))
        state = digest(sorted((display, fact.hash) for display, fact in facts.items()))
        record = index.scopes.get(scope)
        if record is not None and record["digest"] == state:
            plan = Plan([Unit(tuple(unit), parse, tuple(callees)) for unit, parse, callees in record["units"]])
        else:
            plan = self._plan(list(facts), text_of, {display for display, fact in facts.items() if NOQA_TOKEN in fact.tokens}, paths,
                              is_entry=lambda display: not triggers.isdisjoint(facts[display].tokens) and not markers.isdisjoint(facts[display].tokens))
            index.set_scope(scope, {"digest": state, "units": [[list(unit.paths), unit.parse, list(unit.callees)] for unit in plan.units]})
        context = digest(code_fingerprint(), sorted(self.selected_codes), self.settings.per_file_ignores)
        modules = _ModuleNames()
        keys = {
            unit: digest(context, unit.parse, unit.callees, [(display, modules(paths[display]) if unit.parse else "", facts[display].hash) for display in unit.paths])
            for unit in plan.units
        }
        diagnostics: list[Diagnostic] = []
        missing: list[Unit] = []
        cached_files = 0
        for unit in plan.units:
            stored = cache.load_result(keys[unit])
            if stored is None:
                missing.append(unit)
            else:
                diagnostics += [_from_record(item) for item in stored]
                cached_files += len(unit.paths)
        for unit in missing:
            for display in unit.paths:
                text_of(display)
        parsed = 0
        for unit, found, unit_parsed in self._run_units(missing, sources, pool=True, total_files=len(facts) + len(problems)):
            cache.save_result(keys[unit], [_to_record(d) for d in found])
            diagnostics += found
            parsed += unit_parsed
        cache.save_index(index)
        return Result(diagnostics=sorted(problems + diagnostics, key=Diagnostic.sort_key), sources=sources, original=dict(sources), plan=plan,
                      files_read=len(sources) + len(problems), files_parsed=parsed, files_cached=cached_files)

    def index_key(self) -> str:
        """What the file index depends on: the tokens it records."""
        return digest(INDEX_FORMAT, self.watched)[:16]

    def _facts(self, text: str, hash: str) -> FileFacts:
        return FileFacts(hash, [token for token in self.watched if token in text] + ([NOQA_TOKEN] if may_hold_our_noqa(text) else []))

    def _file_problem(self, path: str, code: str, message: str, line: int = 1, column: int = 1, source_lines: list[str] | None = None) -> Diagnostic:
        rule = self.ruleset.by_code[code]
        return Diagnostic(path, line, column, line, column, code, rule.name, message, rule.severity, source_lines=source_lines or [])

    # checking

    def check(self, sources: dict[str, SourceFile], problems: list[Diagnostic], fix: bool = False, unsafe_fixes: bool = False) -> Result:
        result = Result(diagnostics=[], sources=dict(sources), original=dict(sources), files_read=len(sources) + len(problems))
        failed_fixes: list[Diagnostic] = []
        dropped: set[tuple[str, str, int, int]] = set()
        for _ in range(MAX_FIX_PASSES if fix else 1):
            diagnostics, parsed = self._analyze(result.sources, pool=not fix)
            result.files_parsed = max(result.files_parsed, parsed)
            result.diagnostics = diagnostics
            if not fix:
                break
            applied = self._apply_fixes(result, diagnostics, unsafe_fixes, dropped, failed_fixes)
            if not applied:
                break
        result.diagnostics = sorted(problems + result.diagnostics + failed_fixes, key=Diagnostic.sort_key)
        result.take_notes()
        return result

    def _analyze(self, sources: dict[str, SourceFile], pool: bool) -> tuple[list[Diagnostic], int]:
        paths = {display: source.path for display, source in sources.items()}
        plan = self._plan(list(sources), lambda display: sources[display].text, {d for d, s in sources.items() if may_hold_our_noqa(s.text)}, paths)
        diagnostics: list[Diagnostic] = []
        parsed = 0
        for _, found, unit_parsed in self._run_units(plan.units, sources, pool=pool, total_files=len(sources)):
            diagnostics += found
            parsed += unit_parsed
        return diagnostics, parsed

    def _plan(self, displays: list[str], text_of, noqa_candidates: set[str], paths: dict[str, Path], is_entry=None) -> Plan:
        if not self.prefilter:
            return Plan([Unit(tuple(sorted(displays)))] if displays else [])
        modules = _ModuleNames()
        return make_plan(sorted(displays), text_of, self.triggers, noqa_candidates, lambda display: modules(paths[display]), is_entry)

    def _run_units(self, units: list[Unit], sources: dict[str, SourceFile], pool: bool, total_files: int) -> Iterable[tuple[Unit, list[Diagnostic], int]]:
        """Each unit's diagnostics and how many of its files were parsed; in worker processes when there is
        much to parse and no fix needs the trees. Files in no unit here (served from the cache, or holding
        nothing to analyze) count as analyzed."""
        done = total_files - sum(len(unit.paths) for unit in units)
        self.progress(done, total_files)
        for unit, found, parsed in self._analyzed_units(units, sources, pool):
            yield unit, found, parsed
            done += len(unit.paths)
            self.progress(done, total_files)

    def _analyzed_units(self, units: list[Unit], sources: dict[str, SourceFile], pool: bool) -> Iterable[tuple[Unit, list[Diagnostic], int]]:
        size = sum(len(sources[display].text) for unit in units if unit.parse for display in unit.paths)
        workers = min(self.jobs, sum(unit.parse for unit in units))
        if not pool or workers < 2 or size < POOL_MIN_BYTES:
            for unit in units:
                yield unit, *self.analyze_unit(unit, sources)
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
        # Largest first, so that the last unit to finish is a small one.
        order = sorted(units, key=lambda unit: -sum(len(sources[d].text) for d in unit.paths))
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                                 initargs=(self.ruleset, sorted(self.selected_codes), self.settings)) as pool:
            futures = [(unit, pool.submit(_analyze_in_worker, unit, {d: sources[d] for d in unit.paths})) for unit in order]
            for unit, future in futures:
                records, parsed = future.result()
                yield unit, [_from_record(item) for item in records], parsed

    def analyze_unit(self, unit: Unit, sources: dict[str, SourceFile]) -> tuple[list[Diagnostic], int]:
        """The suppressed diagnostics of one unit (a program built from its files, or its `# noqa`
        comments), and how many of its files were parsed."""
        unit_sources = {display: sources[display] for display in unit.paths}
        diagnostics: list[Diagnostic] = []
        parsed: list[str] = []
        if unit.parse:
            with _without_cyclic_gc():
                from fsdplint.model import UnparsedFile

                def parse(source: SourceFile) -> FileModel | None:
                    parsed.append(source.display)
                    return self._parse(source, diagnostics)

                # Files are parsed when the model first needs them: a start when the budget reaches it, a
                # callee file when a name it defines is looked up (most of their functions are never
                # reached). A problem found then is reported as ever. Nothing here keeps the files or the
                # findings past this statement: their trees are freed before the collector is on again,
                # whose first pass would otherwise go over every node of them (0.4 s on torchtitan).
                callees = set(unit.callees)
                diagnostics += self._to_diagnostics(
                    self._run_rules([UnparsedFile(sources[path], parse) for path in unit.paths if path not in callees], diagnostics,
                                    [UnparsedFile(sources[path], parse) for path in unit.callees]), diagnostics)
        return self._suppress(unit_sources, diagnostics), len(parsed)

    def _parse(self, source: SourceFile, errors: list[Diagnostic]) -> FileModel | None:
        """The file's model, or None with the reason added to `errors`."""
        import libcst as cst

        from fsdplint.model import build_file_model
        from fsdplint.model.syntax import parse_module

        path = source.display
        if len(source.text) > MAX_PARSE_CHARS:
            errors.append(self._file_problem(path, "FSDP002", f"too large to analyze ({len(source.text):,} characters; the limit is {MAX_PARSE_CHARS:,})"))
            return None
        python_error = _python_syntax_error(source.text)
        if isinstance(python_error, str):
            errors.append(self._file_problem(path, "FSDP001", python_error))
            return None
        try:
            module = parse_module(source.text)
        except cst.ParserSyntaxError as error:
            if python_error is None:
                # Valid Python that libcst cannot parse (e.g. a line continuation at the end of
                # the file): not a syntax error, but the file cannot be checked.
                errors.append(self._file_problem(path, "FSDP002", f"libcst cannot parse this file, though Python can: {error.message}",
                                                 error.raw_line, error.raw_column + 1, _lines(source.text, error.raw_line)))
            elif python_error.lineno:
                # CPython's message and position are exact; libcst's can point past the error.
                errors.append(self._file_problem(path, "FSDP001", f"SyntaxError: {python_error.msg}", python_error.lineno,
                                                 python_error.offset or 1, _lines(source.text, python_error.lineno)))
            else:
                errors.append(self._file_problem(path, "FSDP001", f"SyntaxError: {error.message}", error.raw_line, error.raw_column + 1,
                                                 _lines(source.text, error.raw_line)))
            return None
        except RecursionError:
            errors.append(self._file_problem(path, "FSDP001", "the file is nested too deeply to parse"))
            return None
        except Exception as error:  # a libcst bug on one file must not stop the others
            errors.append(self._internal_error(path, "parsing with libcst", error))
            return None
        try:
            return build_file_model(source, module)
        except RecursionError:
            errors.append(self._file_problem(path, "FSDP001", "the file is nested too deeply to analyze"))
        except Exception as error:
            errors.append(self._internal_error(path, "the semantic model", error))
        return None

    def _internal_error(self, path: str, what: str, error: BaseException) -> Diagnostic:
        frames = traceback.extract_tb(error.__traceback__)
        # The deepest frame of fsdplint's own code says more than one inside libcst.
        ours = [f for f in frames if "fsdplint" in f.filename or f"{os.sep}rules{os.sep}" in f.filename]
        frame = (ours or frames or [None])[-1]
        where = f" (at {Path(frame.filename).name}:{frame.lineno})" if frame else ""
        return self._file_problem(path, "FSDP009", f"{what} failed on this file: {type(error).__name__}: {error}{where}")

    def _run_rules(self, files: list[UnparsedFile], diagnostics: list[Diagnostic], callees: list[UnparsedFile]) -> list[Finding]:
        """Every rule over the program (`callees`: the files only walked where they are called, parsed
        when first needed). An internal error is reported (FSDP009) against the file and rule it happened
        in, and every other file and rule is still checked."""
        from fsdplint.model import Program

        try:
            programs = [Program(files, callees)]
        except Exception:
            # The model failed on some file: model each file alone (losing only calls across files).
            programs = []
            for file in files:
                try:
                    programs.append(Program([file]))
                except Exception as error:
                    diagnostics.append(self._internal_error(file.source.display, "the semantic model", error))
        findings: list[Finding] = []
        for program in programs:
            for start in program.unanalyzed:
                diagnostics.append(self._file_problem(start.source.display, "FSDP006", "the analysis budget of the files checked with this one "
                                                      "was spent before this file was reached: its facts are unknown and no rule "
                                                      "reports on it", 1, 1, start.source.text.splitlines()[:1]))
            for flow in program.exhausted_flows:
                line = flow.file.position(flow.function.node).start.line if flow.function else 1
                where = f"`{flow.function.qualname}`" if flow.function else "the module body"
                diagnostics.append(self._file_problem(flow.file.display, "FSDP006", f"the analysis of {where} ran past its budget: "
                                                      "its facts are unknown and no rule reports on it", line, 1,
                                                      flow.file.source.text.splitlines()[line - 1:line]))
            skipped: dict[str, list[Flow]] = {}
            for flow in program.skipped_flows:
                skipped.setdefault(flow.file.display, []).append(flow)
            for flows in skipped.values():
                file, count = flows[0].file, len(flows)
                diagnostics.append(self._file_problem(file.display, "FSDP006", f"the analysis budget of the files checked with this one was "
                                                      f"spent before {count} of this file's bodies (functions or the module) were "
                                                      "analyzed: their facts are unknown and no rule reports on them", 1, 1,
                                                      file.source.text.splitlines()[:1]))
            for rule in self.rules:
                findings += self._check_isolated(rule, program, diagnostics)
            program.release()
        return findings

    def _check_isolated(self, rule: Rule, program: Program, diagnostics: list[Diagnostic]) -> list[Finding]:
        """The rule's findings; when it fails, it runs again file by file to find where."""
        try:
            return self._located(rule, program)
        except Exception as error:
            if len(program.files) == 1:
                diagnostics.append(self._internal_error(program.files[0].display, rule.code, error))
                return []
        findings: list[Finding] = []
        for file in program.files:
            try:
                findings += self._located(rule, program.only(file))
            except Exception as error:
                diagnostics.append(self._internal_error(file.display, rule.code, error))
        return findings

    @staticmethod
    def _located(rule: Rule, program: Program) -> list[Finding]:
        """The rule's findings, each with its positions resolved (a node outside the tree fails here)."""
        findings = list(rule.check(program))
        for finding in findings:
            finding.rule_code = rule.code
            finding.file.position(finding.node)
            for related in finding.related:
                related.file.position(related.node)
        return findings

    def _to_diagnostics(self, findings: list[Finding], errors: list[Diagnostic]) -> list[Diagnostic]:
        diagnostics: dict[tuple, Diagnostic] = {}
        rule_of = {}
        for finding in findings:
            rule = rule_of.get(finding.rule_code) or self.ruleset.by_code[finding.rule_code]
            rule_of[finding.rule_code] = rule
            position = finding.file.position(finding.node)
            key = (finding.file.display, position.start.line, position.start.column, rule.code)
            if key in diagnostics:
                continue
            fix, edits = finding.fix, ()
            if fix is not None:
                try:
                    edits = _edits_of(finding.file, fix)
                except Exception as error:  # a fix that raises is reported, and offered to nobody
                    errors.append(self._internal_error(finding.file.display, f"the fix of {rule.code}", error))
                    fix = None
            diagnostics[key] = Diagnostic(
                path=finding.file.display,
                line=position.start.line,
                column=position.start.column + 1,
                end_line=position.end.line,
                end_column=position.end.column + 1,
                code=rule.code,
                name=rule.name,
                message=finding.message,
                severity=finding.severity or rule.severity,
                fix=fix,
                edits=edits,
                source_lines=_lines(finding.file.source.text, position.start.line, position.end.line),
                file=finding.file,
                related=tuple(_resolved(related) for related in finding.related),
            )
        return list(diagnostics.values())

    def _ignored_by_path(self, path: str) -> set[str]:
        ignored: set[str] = set()
        posix = Path(path).as_posix()
        for pattern, codes in self._per_file_ignores:
            if fnmatch.fnmatch(posix, pattern) or fnmatch.fnmatch(Path(path).name, pattern):
                ignored |= codes
        return ignored

    def _suppress(self, sources: dict[str, SourceFile], diagnostics: list[Diagnostic]) -> list[Diagnostic]:
        """Apply selection, per-file-ignores and `# noqa`; report noqa comments that do nothing."""
        by_path: dict[str, list[Diagnostic]] = {}
        for diagnostic in diagnostics:
            by_path.setdefault(diagnostic.path, []).append(diagnostic)
        kept: list[Diagnostic] = []
        for path, source in sources.items():
            if path not in by_path and OUR_PREFIX not in source.text:
                continue  # nothing to suppress and no fsdplint code a noqa could name
            suppressions = parse_suppressions(source.text)
            if not self.line_noqa:
                suppressions.lines.clear()  # a host tool (flake8) applies its own `# noqa`
            ignored = self._ignored_by_path(path)
            for diagnostic in by_path.get(path, []):
                if diagnostic.code not in self.selected_codes or diagnostic.code in ignored:
                    continue
                if takes_noqa(diagnostic.code) and suppressions.suppress(diagnostic.code, diagnostic.line):
                    continue
                kept.append(diagnostic)
            kept += self._noqa_problems(path, source.text, suppressions, ignored)
        return kept

    def _noqa_problems(self, path: str, text: str, suppressions: Suppressions, ignored: set[str]) -> list[Diagnostic]:
        problems: list[Diagnostic] = []
        for directive in suppressions.lines.values():
            ours = [code for code in directive.codes or () if code.startswith(OUR_PREFIX)]
            unknown = [code for code in ours if code not in self.ruleset.by_code]
            if unknown and "FSDP004" in self.selected_codes and "FSDP004" not in ignored:
                problems.append(self._file_problem(path, "FSDP004", f"Unknown fsdplint code in `# noqa`: {', '.join(unknown)}", directive.line,
                                                   directive.column, _lines(text, directive.line)))
            checked = [code for code in ours if code in self.selected_codes and code not in unknown]
            if checked and not directive.used.intersection(checked) and "FSDP003" in self.selected_codes and "FSDP003" not in ignored:
                problems.append(self._file_problem(path, "FSDP003", f"Unused `# noqa` directive (nothing to suppress: {', '.join(checked)})",
                                                   directive.line, directive.column, _lines(text, directive.line)))
        return problems

    # fixing

    def _apply_fixes(self, result: Result, diagnostics: list[Diagnostic], unsafe_fixes: bool, dropped: set, failed: list[Diagnostic]) -> int:
        applied = 0
        by_file: dict[str, list[Diagnostic]] = {}
        for diagnostic in diagnostics:
            key = (diagnostic.path, diagnostic.code, diagnostic.line, diagnostic.column)
            if diagnostic.fix and (diagnostic.fix.safe or unsafe_fixes) and key not in dropped:
                by_file.setdefault(diagnostic.path, []).append(diagnostic)
        for path, fixable in by_file.items():
            model = fixable[0].file
            chosen: list[Diagnostic] = []
            touched: set[int] = set()
            for diagnostic in fixable:
                nodes = diagnostic.fix.nodes()
                if not nodes & touched:  # a conflicting fix waits for the next pass
                    chosen.append(diagnostic)
                    touched |= nodes
            text, _ = _fixed_text(model, chosen)
            if text is None:
                # Keep the fixes that work and parse on their own; drop and report the others.
                good = []
                for diagnostic in chosen:
                    text, error = _fixed_text(model, good + [diagnostic])
                    if text is not None:
                        good.append(diagnostic)
                        continue
                    dropped.add((diagnostic.path, diagnostic.code, diagnostic.line, diagnostic.column))
                    if error is not None:
                        failed.append(self._internal_error(path, f"the fix of {diagnostic.code}", error))
                    else:
                        failed.append(replace(diagnostic, code="FSDP005", name=self.ruleset.by_code["FSDP005"].name, severity=Severity.ERROR, fix=None, edits=(),
                                              message=f"The fix for {diagnostic.code} was dropped: its output would not parse"))
                chosen = good
                text = _fixed_text(model, chosen)[0] if chosen else None
            if chosen and text != result.sources[path].text:
                result.sources[path] = replace(result.sources[path], text=text)
                result.fixed += chosen
                result.fixes_by_path[path] = result.fixes_by_path.get(path, 0) + len(chosen)
                applied += len(chosen)
        return applied

    def unfix(self, result: Result, paths: list[str]) -> Result:
        """The result with these files as they were (their fix could not be written): their own
        findings come back, and their fixes are not counted."""
        unfixed = self.check(result.original, [], fix=False)
        diagnostics = [d for d in result.diagnostics if d.path not in paths] + [d for d in unfixed.diagnostics if d.path in paths]
        sources = {path: result.original[path] if path in paths else source for path, source in result.sources.items()}
        fixes = {path: count for path, count in result.fixes_by_path.items() if path not in paths}
        fixed = [d for d in result.fixed if d.path not in paths]
        return replace(result, diagnostics=sorted(diagnostics, key=Diagnostic.sort_key), sources=sources, fixes_by_path=fixes, fixed=fixed)


def _fixed_text(model: FileModel, diagnostics: list[Diagnostic]) -> tuple[str | None, Exception | None]:
    """The file with these diagnostics' fixes applied: (text, None) when it parses, (None, None) when it
    does not, (None, error) when a fix raised."""
    from fsdplint import fixes

    try:
        text = fixes.apply_fixes(model, [d.fix for d in diagnostics])
    except Exception as error:
        return None, error
    return (text, None) if parses(text) else (None, None)


def _resolved(related: Related) -> RelatedLocation:
    position = related.file.position(related.node)
    return RelatedLocation(related.file.display, position.start.line, position.start.column + 1, position.end.line, position.end.column + 1,
                           related.message)


def _edits_of(file: FileModel, fix: Fix) -> tuple[TextEdit, ...]:
    from fsdplint.fixes import apply_fixes

    before = file.source.text
    after = apply_fixes(file, [fix])
    return text_edits(before, after) if after != before and parses(after) else ()


def _lines(text: str, first: int, last: int | None = None) -> list[str]:
    """Lines `first` to `last` (1-based, default: `first` alone) of `text`."""
    return split_lines(text)[first - 1:last or first]


def parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _python_syntax_error(text: str) -> str | SyntaxError | None:
    """Parse `text` with CPython first: a reason it must not reach libcst, its SyntaxError, or None.

    libcst's Rust parser overflows its stack and kills the process (SIGSEGV, no exception) on very
    deep nesting such as 5000 parentheses or a 50000-term `1+1+...`. CPython's parser guards its
    stack and raises instead, so it screens the file first. Other syntax errors still go to libcst,
    which may accept grammar newer than the running Python.
    """
    try:
        ast.parse(text)
    except (RecursionError, MemoryError):
        return "the file is nested too deeply to parse"
    except SyntaxError as error:
        if "too many nested" in str(error) or "too complex" in str(error):
            return f"SyntaxError: {error.msg}"
        return error
    except ValueError:
        pass
    return None


@dataclass(frozen=True)
class _Candidate:
    path: Path
    display: str


def _read(candidate) -> tuple[SourceFile, bytes]:
    try:
        data = Path(candidate.path).read_bytes()
    except OSError as error:
        raise SourceError(f"cannot read: {error.strerror or error}") from None
    return decode_source(data, Path(candidate.path), candidate.display), data


class _ModuleNames:
    """`module_name_for`, remembering which folders are packages."""

    def __init__(self) -> None:
        self.names: dict[Path, str] = {}

    def __call__(self, path: Path) -> str:
        if path not in self.names:
            self.names[path] = module_name_for(path)
        return self.names[path]


def _to_record(diagnostic: Diagnostic) -> dict:
    record = {name: value for name, value in asdict(replace(diagnostic, fix=None, edits=(), file=None)).items() if name not in ("fix", "edits", "file")}
    record["severity"] = diagnostic.severity.value
    record["fix"] = None if diagnostic.fix is None else [diagnostic.fix.message, diagnostic.fix.safe]
    record["edits"] = [[e.range.start.line, e.range.start.column, e.range.end.line, e.range.end.column, e.new_text] for e in diagnostic.edits]
    return record


def _from_record(record: dict) -> Diagnostic:
    fix = record["fix"]
    edits = tuple(TextEdit(Range(Position(line, column), Position(end_line, end_column)), text) for line, column, end_line, end_column, text in record["edits"])
    related = tuple(RelatedLocation(**location) for location in record["related"])
    return Diagnostic(**{**record, "severity": Severity(record["severity"]), "fix": FixSummary(*fix) if fix else None, "edits": edits, "related": related})


_worker_engine: Engine | None = None


@contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """The parse trees and the model are hundreds of thousands of objects that live until the unit is
    done, in no cycle worth collecting: the cyclic collector's full passes over them cost a third of
    a large unit's time (accelerate: 56 s -> 35 s in one process, the same peak memory)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _start_worker(ruleset: RuleSet, codes: list[str], settings: Settings) -> None:
    global _worker_engine
    _worker_engine = Engine(ruleset, [ruleset.by_code[code] for code in codes], settings, jobs=1)


def _analyze_in_worker(unit: Unit, sources: dict[str, SourceFile]) -> tuple[list[dict], int]:
    diagnostics, parsed = _worker_engine.analyze_unit(unit, sources)
    return [_to_record(d) for d in diagnostics], parsed
