"""Which files a run parses, and how they split into groups that can be analyzed apart: from the text.

A file is an entry, where analysis starts, when it holds a trigger token of a selected rule and uses
torch.distributed or FSDP (`distributed.DISTRIBUTED_MARKERS`): a function that merely happens to be
called `get_rank` does not make one. A file is parsed when it is an entry, or when the model could
reach it from one: it calls (under any alias, through any number of files) a function whose body holds
a trigger token (a trainer calling its parallelize function), or it defines a function or class that a
parsed file uses (an optimizer built by a helper, a method inherited from a base class). Such a callee
file is parsed when the model first needs it and walked where it is called: its functions are no flows
of their own (`Unit.callees`). Across files, the model resolves calls of functions whose qualified name
is their name (not nested functions), and methods of the classes defined at top level, through an
import (`from m import f`, `import m; m.f()`); `fsdplint.model.Program` also shares what a class shards
on `self` between files of the same module name. So two found files belong to one group when one
imports a name the other defines at top level, or the other's module with `*` (whose module is parsed
with it), or they have the same module name; each group is one program.
A group's findings depend on its files only, which is what lets the cache key them by their contents.

Nothing here imports libcst.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterable

from fsdplint.distributed import DISTRIBUTED_MARKERS, is_torch_name

_LINE = re.compile(r"^([ \t]*)([^\s#].*)$", re.M)
_HEADER = re.compile(r"(?:async[ \t]+)?(def|class)[ \t]+(\w+)")
# Regular expressions that start with a literal run at C speed; the others scan a megabyte in ~0.1 s.
_IMPORT_KEYWORD = re.compile(r"import\b")
_FROM_CLAUSE = re.compile(r"[ \t]*from[ \t]+[.\w]+[ \t]+")
_CLAUSE = re.compile(r"[ \t]*(\([^)]*\)|[^\n]*(?:\\\n[^\n]*)*)")
_DOTTED = re.compile(r"\b([A-Za-z_]\w*)((?:[ \t]*\.[ \t]*[A-Za-z_]\w*)+)")
_DEFINITION = re.compile(r"(?:def|class)[ \t]+(\w+)")


@dataclass
class FileText:
    """What the planner reads from one file's text."""

    text: str

    @property
    def exported(self) -> dict[str, str]:
        """Functions the model can resolve from another file (qualified name == name) -> their text."""
        return self._top_level[0]

    @property
    def classes(self) -> set[str]:
        """Classes the model can resolve from another file: those defined at top level."""
        return self._top_level[1]

    @cached_property
    def _top_level(self) -> tuple[dict[str, str], set[str]]:
        """The exported functions with their text, and the top-level classes.

        A line scanner over indentation: a `def` or `class` is exported unless a `def` or `class`
        encloses it. A line of a multi-line string can only end a block early, which exports more, never less.
        """
        functions: dict[str, str] = {}
        classes: set[str] = set()
        stack: list[tuple[int, str, str, int, bool]] = []  # indent, kind, name, start, exported

        def close(entry: tuple[int, str, str, int, bool], end: int) -> None:
            _, kind, name, start, exported = entry
            if kind == "def" and exported:
                functions[name] = functions.get(name, "") + self.text[start:end]
            elif exported:
                classes.add(name)

        for line in _LINE.finditer(self.text):
            indent = len(line.group(1).expandtabs())
            while stack and stack[-1][0] >= indent:
                close(stack.pop(), line.start())
            header = _HEADER.match(line.group(2))
            if header:
                exported = not stack or all(kind not in ("def", "class") for _, kind, *_ in stack)
                stack.append((indent, header.group(1), header.group(2), line.start(), exported))
        while stack:
            close(stack.pop(), len(self.text))
        return functions, classes

    @property
    def imported(self) -> set[str]:
        return self._imports[0]

    @property
    def star_modules(self) -> set[str]:
        """The modules, not torch's, of `from m import *` (as written, without leading dots)."""
        return self._imports[2]

    @cached_property
    def _imports(self) -> tuple[set[str], set[str], set[str]]:
        """(names imported from a module, local names an import binds, modules imported with `*`),
        from each `import` keyword that starts a statement (`import m`) or follows `from m` at the
        start of one."""
        imported: set[str] = set()
        bound: set[str] = set()
        starred: set[str] = set()
        text = self.text
        for keyword in _IMPORT_KEYWORD.finditer(text):
            line_start = text.rfind("\n", 0, keyword.start()) + 1
            before = text[line_start:keyword.start()]
            clause = _CLAUSE.match(text, keyword.end()).group(1)
            if before.strip() == "":
                for item in _split_names(clause):
                    name, _, alias = item.partition(" as ")
                    if not is_torch_name(name.strip()):
                        bound.add(alias.strip() if alias else name.strip().split(".")[0])
            elif before.lstrip().startswith("from") and _FROM_CLAUSE.fullmatch(before) and not is_torch_name(before.split()[1]):
                if clause.strip() == "*":
                    starred.add(before.split()[1].lstrip("."))
                for item in _split_names(clause):
                    name, _, alias = item.partition(" as ")
                    imported.add(name.strip())
                    bound.add((alias or name).strip())
        return imported, bound, starred

    @cached_property
    def references(self) -> set[str]:
        """Names this file may resolve to a function of another file: imported names, and the last
        part of `m.f` chains whose head an import binds. (The model's `qualify` works the same way.)"""
        imported, bound, _ = self._imports
        refs = set(imported)
        for match in _DOTTED.finditer(self.text):
            if match.group(1) in bound:
                refs.add(match.group(2).rsplit(".", 1)[-1].strip())
        return refs


def defined_names(text: str) -> frozenset[str]:
    """Every name a `def` or `class` of the text may define, at any depth (a word in a string too: more, never less)."""
    return frozenset(_DEFINITION.findall(text))


def _split_names(clause: str) -> Iterable[str]:
    clause = re.sub(r"#[^\n]*", "", clause).replace("\\\n", " ").strip().strip("()")
    for item in clause.split(","):
        item = " ".join(item.split())
        if item and item != "*":
            yield item


def is_module(module_name: str, module: str) -> bool:
    """`module`, as an import spells it (without its leading dots), is the module `module_name`: the
    same, or one of the two a package-qualified form of the other."""
    return bool(module) and (module_name == module or module_name.endswith("." + module) or module.endswith("." + module_name))


def module_name_for(path: Path) -> str:
    """`pkg/sub/mod.py` -> `pkg.sub.mod`, walking up while the folder is a package: one with an
    `__init__.py`, or a folder without one directly inside such a package, which Python imports as a
    namespace package of it (PEP 420: RL2's `RL2/utils/fsdp/`, imported as `RL2.utils.fsdp`)."""
    parts = [path.stem] if path.stem != "__init__" else []
    folder = path.resolve().parent
    while folder != folder.parent and ((folder / "__init__.py").exists() or (folder.parent / "__init__.py").exists()):
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)


@dataclass(frozen=True)
class Unit:
    """Files analyzed together: one program (`parse`), or a file only checked for `# noqa` comments."""

    paths: tuple[str, ...]  # display paths, sorted
    parse: bool = True
    # Those of `paths` parsed only because a parsed file calls a function they define: their functions
    # are walked where they are called, never as flows of their own (analysis starts at the others).
    callees: tuple[str, ...] = ()


@dataclass
class Plan:
    units: list[Unit] = field(default_factory=list)

    @property
    def parsed(self) -> list[str]:
        return sorted(path for unit in self.units if unit.parse for path in unit.paths)


def _words(names: Iterable[str]) -> re.Pattern[str] | None:
    names = sorted(set(names))
    return re.compile(r"\b(?:" + "|".join(map(re.escape, names)) + r")\b") if names else None


def make_plan(
    paths: list[str],
    text_of: Callable[[str], str],
    triggers: tuple[str, ...],
    noqa_candidates: set[str],
    module_name: Callable[[str], str],
    is_entry: Callable[[str], bool] | None = None,
) -> Plan:
    """The units of a run over `paths` (display paths), reading texts through `text_of`.
    `is_entry` answers from what is already known of a file (the cache's tokens) instead of
    searching its text for each token again: that search is most of a cold run's plan."""
    files: dict[str, FileText] = {}

    def info(path: str) -> FileText:
        if path not in files:
            files[path] = FileText(text_of(path))
        return files[path]

    if is_entry is None:
        def is_entry(path: str) -> bool:
            text = info(path).text
            # The few markers first: most files of a repository without FSDP code hold none of them.
            return any(marker in text for marker in DISTRIBUTED_MARKERS) and any(token in text for token in triggers)

    parsed = set(filter(is_entry, paths))
    # Callers, to a fixed point: functions reaching trigger code, and the files that import them.
    reaching = {name for path in parsed for name, body in info(path).exported.items() if any(t in body for t in triggers)}
    pending = set(reaching)
    while pending:
        pattern = _words(pending)
        # `from m import name`, or `m.name` (the literal "." makes this search fast; `references` is not)
        attribute = re.compile(r"\.[ \t]*" + pattern.pattern)
        callers = [
            path for path in paths
            if path not in parsed
            and (info(path).imported & pending or attribute.search(info(path).text) and info(path).references & pending)
        ]
        parsed.update(callers)
        every = _words(reaching)
        pending = {name for path in callers for name, body in info(path).exported.items() if every.search(body)} - reaching
        reaching |= pending
    # Callees, to a fixed point: files defining a function some parsed file may call, or a class whose
    # methods it may call (`Net().shard(mesh)`, inherited from a base class of another file).
    wanted = {name for path in parsed for name in info(path).references}
    # Which unparsed file defines which name: indexed when a name is first looked up (a run with
    # nothing parsed reads no file for its definitions; one whose only link is a star import still may).
    defined_in: dict[str, list[str]] | None = None
    # ... and the modules of the run a parsed file imports with `*` (`from utils import *`), whose
    # names it uses unwritten: each is parsed and analyzed with it.
    seen: set[str] = set()
    starts = set(parsed)
    starred = sorted(path for path in parsed if info(path).star_modules)
    star_links: list[tuple[str, str]] = []
    modules: dict[str, list[str]] | None = None
    while wanted - seen or starred:
        added: list[str] = []
        if starred:
            if modules is None:
                modules = {}
                for path in paths:
                    modules.setdefault(module_name(path), []).append(path)
            importer = starred.pop()
            for module in info(importer).star_modules:
                for name, found in modules.items():
                    if is_module(name, module):
                        star_links += [(importer, path) for path in found]
                        added += [path for path in found if path not in parsed]
        else:
            name = min(wanted - seen)
            seen.add(name)
            if defined_in is None:
                defined_in = {}
                for path in paths:
                    if path not in parsed:
                        for defined in defined_names(info(path).text):
                            defined_in.setdefault(defined, []).append(path)
            added = [path for path in defined_in.get(name, ()) if path not in parsed and (name in info(path).exported or name in info(path).classes)]
        for path in dict.fromkeys(added):
            parsed.add(path)
            wanted |= info(path).references
            if info(path).star_modules:
                starred.append(path)
    return Plan(_group(sorted(parsed), info, module_name, parsed - starts, star_links)
                + [Unit((path,), parse=False) for path in sorted(noqa_candidates - parsed)])


def _group(paths: list[str], info: Callable[[str], FileText], module_name: Callable[[str], str], callees: set[str],
           links: list[tuple[str, str]]) -> list[Unit]:
    parent = {path: path for path in paths}

    def find(path: str) -> str:
        while parent[path] != path:
            parent[path] = parent[parent[path]]
            path = parent[path]
        return path

    def union(a: str, b: str) -> None:
        parent[find(a)] = find(b)

    exporters: dict[str, list[str]] = {}
    by_module: dict[str, str] = {}
    for path in paths:
        for name in (*info(path).exported, *info(path).classes):
            exporters.setdefault(name, []).append(path)
        module = module_name(path)
        if module in by_module:
            union(path, by_module[module])
        by_module.setdefault(module, path)
    for path in paths:
        for name in info(path).references:
            for other in exporters.get(name, ()):
                union(path, other)
    for importer, imported in links:
        union(importer, imported)
    groups: dict[str, list[str]] = {}
    for path in paths:
        groups.setdefault(find(path), []).append(path)
    return sorted((Unit(tuple(members), callees=tuple(path for path in members if path in callees)) for members in groups.values()),
                  key=lambda unit: unit.paths)
