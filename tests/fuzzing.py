"""Fuzzing support: the example budget, mutations of the FSDP fixtures, and the proof that a fix
changed only what it names.

The budget is small and derandomized in the normal test run; `FSDPLINT_FUZZ_EXAMPLES=10000` runs
that many examples per fuzz test (see README, Testing).
"""

from __future__ import annotations

import builtins
import contextlib
import difflib
import functools
import os
import re
import signal
from pathlib import Path
from typing import Callable, Iterator

import libcst as cst
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from fsdplint.fixes import AddImport, DropImportIfUnused, Fix, InsertAfter, InsertBefore, MoveAfter, Replace
from fsdplint.model import dotted_name
from fsdplint.model import FileModel

FIXTURES = Path(__file__).parent / "fixtures"
BAD_FIXTURES = sorted(FIXTURES.glob("FSDP*/bad.py"))
# A run that takes longer than this on one input is a hang, not a slow machine.
HANG_SECONDS = 60
_BUILTINS = frozenset(dir(builtins))


def fuzz_settings(ci_examples: int) -> settings:
    """`ci_examples` per test, or FSDPLINT_FUZZ_EXAMPLES; always the same inputs for the same budget."""
    examples = int(os.environ.get("FSDPLINT_FUZZ_EXAMPLES") or ci_examples)
    return settings(
        max_examples=examples, derandomize=True, database=None, deadline=None, print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


class Hang(Exception):
    pass


@contextlib.contextmanager
def no_hang(seconds: int = HANG_SECONDS) -> Iterator[None]:
    """Fail the example, instead of the whole run, when fsdplint does not finish in time."""

    def expire(signum, frame):
        raise Hang(f"no result after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# Mutations of the fixtures. Each takes hypothesis' `draw` and a module and returns a module that
# still parses; what the code means may change (that is the point: odd but valid input).

Draw = Callable


def _suites(module: cst.Module) -> list[cst.CSTNode]:
    """The module and every indented block in it, in source order."""
    found: list[cst.CSTNode] = [module]

    class Collect(cst.CSTVisitor):
        def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
            found.append(node)

    module.visit(Collect())
    return found


def _replace_suite_body(module: cst.Module, suite: cst.CSTNode, edit: Callable[[list], list]) -> cst.Module:
    if suite is module:
        return module.with_changes(body=edit(list(module.body)))

    class Edit(cst.CSTTransformer):
        def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
            return updated.with_changes(body=edit(list(updated.body))) if original is suite else updated

    return module.visit(Edit())


def _binding_names(module: cst.Module) -> list[str]:
    """Names the code binds or uses as plain variables (not attributes, keywords or builtins)."""
    names: set[str] = set()
    skipped = _non_variable_names(module)

    class Collect(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            if id(node) not in skipped and node.value not in _BUILTINS and not node.value.startswith("__"):
                names.add(node.value)

    module.visit(Collect())
    return sorted(names)


def _non_variable_names(module: cst.Module) -> set[int]:
    """Ids of Name nodes that are not variables: attribute names, keywords, imported module paths."""
    skipped: set[int] = set()

    class Collect(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> None:
            skipped.add(id(node.attr))

        def visit_Arg(self, node: cst.Arg) -> None:
            if node.keyword is not None:
                skipped.add(id(node.keyword))

        def visit_Import(self, node: cst.Import) -> bool:
            return False

        def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
            return False

    module.visit(Collect())
    return skipped


def _rename(module: cst.Module, old: str, new: cst.BaseExpression) -> cst.Module:
    """Every variable use of `old` becomes `new`; imports are left as they are."""
    skipped = _non_variable_names(module)

    class Rename(cst.CSTTransformer):
        def visit_Import(self, node) -> bool:
            return False

        def visit_ImportFrom(self, node) -> bool:
            return False

        def leave_Name(self, original: cst.Name, updated: cst.Name):
            return new if updated.value == old and id(original) not in skipped else updated

    return module.visit(Rename())


def rename_variable(draw: Draw, module: cst.Module) -> cst.Module:
    names = _binding_names(module)
    if not names:
        return module
    old = draw(st.sampled_from(names))
    new = draw(st.sampled_from([f"{old}_2", f"_{old}", f"{old}é", f"ŋ{old}"]))
    return _rename(module, old, cst.Name(new))


def alias_import(draw: Draw, module: cst.Module) -> cst.Module:
    """`from m import n` -> `from m import n as _n_alias` or `import m as _m_mod` (uses follow)."""
    choices = [
        (index, alias)
        for index, statement in enumerate(module.body)
        if isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], cst.ImportFrom)
        and not statement.body[0].relative and not isinstance(statement.body[0].names, cst.ImportStar)
        for alias in statement.body[0].names if alias.asname is None and isinstance(alias.name, cst.Name)
    ]
    if not choices:
        return module
    index, alias = draw(st.sampled_from(choices))
    statement = module.body[index]
    imported = statement.body[0]
    name = alias.name.value
    if draw(st.booleans()) and len(imported.names) == 1:
        local = f"_{name}_mod"
        new_import = cst.Import(names=[cst.ImportAlias(name=imported.module, asname=cst.AsName(cst.Name(local)))])
        module = _rename(module, name, cst.Attribute(cst.Name(local), cst.Name(name)))
    else:
        local = f"_{name}_alias"
        names = [a.with_changes(asname=cst.AsName(cst.Name(local))) if a is alias else a for a in imported.names]
        new_import = imported.with_changes(names=names)
        module = _rename(module, name, cst.Name(local))
    body = list(module.body)
    body[index] = body[index].with_changes(body=[new_import])
    return module.with_changes(body=body)


def _block(statements: list[cst.BaseStatement]) -> cst.IndentedBlock:
    return cst.IndentedBlock(body=statements)


def _line(code: str) -> cst.SimpleStatementLine:
    return cst.parse_statement(code)


_WRAPPERS: dict[str, Callable[[list], list]] = {
    "def": lambda body: [cst.FunctionDef(cst.Name("_wrapped"), cst.Parameters(), _block(body)), _line("_wrapped()\n")],
    "async def": lambda body: [cst.FunctionDef(cst.Name("_wrapped"), cst.Parameters(), _block(body), asynchronous=cst.Asynchronous())],
    "class": lambda body: [cst.ClassDef(cst.Name("_Wrapped"), _block(body))],
    "for": lambda body: [cst.For(cst.Name("_"), cst.parse_expression("range(1)"), _block(body))],
    "while": lambda body: [cst.While(cst.Name("True"), _block(body + [_line("break\n")]))],
    "with": lambda body: [cst.With([cst.WithItem(cst.parse_expression("contextlib.nullcontext()"))], _block(body))],
    "try": lambda body: [cst.Try(_block(body), handlers=[cst.ExceptHandler(_block([_line("raise\n")]), type=cst.Name("Exception"))])],
    "try-finally": lambda body: [cst.Try(_block(body), finalbody=cst.Finally(_block([_line("pass\n")])))],
    "if": lambda body: [cst.If(cst.Name("True"), _block(body), orelse=cst.Else(_block([_line("pass\n")])))],
}


def nest(draw: Draw, module: cst.Module) -> cst.Module:
    """Wrap a run of statements of some block in a def, class, loop, with, try or if."""
    suite = draw(st.sampled_from(_suites(module)))
    size = len(suite.body)
    start = draw(st.integers(0, size - 1))
    end = draw(st.integers(start + 1, size))
    wrap = _WRAPPERS[draw(st.sampled_from(sorted(_WRAPPERS)))]
    return _replace_suite_body(module, suite, lambda body: body[:start] + wrap(body[start:end]) + body[end:])


def swap_statements(draw: Draw, module: cst.Module) -> cst.Module:
    suites = [suite for suite in _suites(module) if len(suite.body) >= 2]
    if not suites:
        return module
    suite = draw(st.sampled_from(suites))
    index = draw(st.integers(0, len(suite.body) - 2))

    def swap(body: list) -> list:
        body[index], body[index + 1] = body[index + 1], body[index]
        return body

    return _replace_suite_body(module, suite, swap)


_COMMENTS = ["# fully_shard(model)", "# noqa", "# noqa: FSDP999", "# type: ignore", "#", "# ✓ modèle → 模型", "#\tmodel.forward(x)"]


def add_comment(draw: Draw, module: cst.Module) -> cst.Module:
    """A comment line above a statement, or a trailing comment on a simple one."""
    suite = draw(st.sampled_from(_suites(module)))
    index = draw(st.integers(0, len(suite.body) - 1))
    text = draw(st.sampled_from(_COMMENTS))
    trailing = draw(st.booleans())

    def comment(body: list) -> list:
        statement = body[index]
        if trailing and isinstance(statement, cst.SimpleStatementLine):
            body[index] = statement.with_changes(trailing_whitespace=cst.TrailingWhitespace(cst.SimpleWhitespace("  "), cst.Comment(text)))
        else:
            line = cst.EmptyLine(indent=True, whitespace=cst.SimpleWhitespace(""), comment=cst.Comment(text))
            body[index] = statement.with_changes(leading_lines=[*statement.leading_lines, line])
        return body

    return _replace_suite_body(module, suite, comment)


def _calls(module: cst.Module) -> list[cst.Call]:
    """Calls outside f-strings (a line break inside one is a syntax error before Python 3.12)."""
    found: list[cst.Call] = []

    class Collect(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            found.append(node)

        def visit_FormattedString(self, node: cst.FormattedString) -> bool:
            return False

    module.visit(Collect())
    return found


def _edit_node(module: cst.Module, target: cst.CSTNode, edit: Callable[[cst.CSTNode], cst.CSTNode]) -> cst.Module:
    class Edit(cst.CSTTransformer):
        def on_leave(self, original, updated):
            return edit(updated) if original is target else updated

    return module.visit(Edit())


def odd_whitespace(draw: Draw, module: cst.Module) -> cst.Module:
    """Spaces and line breaks inside a call, extra parentheses, a blank line of spaces, `;`."""
    kind = draw(st.sampled_from(["call-spaces", "call-lines", "parens", "blank", "semicolon"]))
    if kind in ("call-spaces", "call-lines", "parens"):
        calls = _calls(module)
        if not calls:
            return module
        call = draw(st.sampled_from(calls))
        if kind == "call-spaces":
            edit = lambda node: node.with_changes(whitespace_after_func=cst.SimpleWhitespace(" "), whitespace_before_args=cst.SimpleWhitespace("  "))
        elif kind == "call-lines":
            broken = cst.ParenthesizedWhitespace(first_line=cst.TrailingWhitespace(), indent=True, last_line=cst.SimpleWhitespace("        "))
            edit = lambda node: node.with_changes(whitespace_before_args=broken)
        else:
            edit = lambda node: node.with_changes(lpar=[*node.lpar, cst.LeftParen()], rpar=[cst.RightParen(), *node.rpar])
        return _edit_node(module, call, edit)
    suite = draw(st.sampled_from(_suites(module)))
    index = draw(st.integers(0, len(suite.body) - 1))

    def blank(body: list) -> list:
        statement = body[index]
        line = cst.EmptyLine(indent=False, whitespace=cst.SimpleWhitespace(draw(st.sampled_from(["  ", "\t", " \t "]))))
        body[index] = statement.with_changes(leading_lines=[line, *statement.leading_lines])
        return body

    def semicolon(body: list) -> list:
        first, second = body[index], body[index + 1] if index + 1 < len(body) else None
        if isinstance(first, cst.SimpleStatementLine) and isinstance(second, cst.SimpleStatementLine) and not second.leading_lines:
            last = first.body[-1].with_changes(semicolon=cst.Semicolon(whitespace_after=cst.SimpleWhitespace(" ")))
            body[index:index + 2] = [first.with_changes(body=[*first.body[:-1], last, *second.body], trailing_whitespace=second.trailing_whitespace)]
        return body

    return _replace_suite_body(module, suite, blank if kind == "blank" else semicolon)


# FSDP code in odd places and shapes, so that the rules and their fixes meet them.
FSDP_SNIPPETS = [
    "fully_shard(model)\n",
    "fully_shard(model.layers[0])\n",
    "fully_shard(model.layers)\n",
    "for b in model.layers: fully_shard(b); fully_shard(b)\n",
    "model.forward(x)\n",
    "model.forward(x).sum().backward()\n",
    "out = model.forward(x) if x is not None else model.forward(y)\n",
    "f = lambda: model.forward(x)\n",
    "ys = [model.forward(i) for i in range(2)]\n",
    'print(f"{model.forward(x)}")\n',
    "if (out := model.forward(x)) is not None: pass\n",
    "def g(a=model.forward(x)): pass\n",
    "@decorate(model.forward(x))\ndef h(): pass\n",
    "async def a(): await model.forward(x)\n",
    "assert model.forward(x) is not None\n",
    "match x:\n    case 1:\n        model.forward(x)\n",
    "try:\n    pass\nexcept* ValueError:\n    model.forward(x)\n",
    "with model.no_sync():\n    model(x)\n",
    "with model.no_sync(), open('f'):\n    pass\n",
    "with model.no_sync() as s:\n    pass\n",
    "with (model.no_sync()):\n    model(x)  # comment\n",
    "with model.no_sync(): model(x); model(y)\n",
    "async def b():\n    async with model.no_sync():\n        pass\n",
    "model.clip_grad_norm_(1.0)\n",
    "model.set_requires_gradient_sync(False)\n",
    "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)\n",
    "optimizer.step()\n",
    "model(x)\n",
    "model.reshard()\n",
    "torch.save(model.state_dict(), 'p.pt')\n",
    "torch.save({'model': model.state_dict(), 'optim': optimizer.state_dict()}, path)\n",
    "if dist.get_rank() == 0: torch.save(model.state_dict(), 'p.pt')\n",
    "clone = copy.deepcopy(model)\n",
    "model = Net(device='meta')\n",
    "model.to_empty(device='cpu')\n",
    "FullyShardedDataParallel.summon_full_params(model)\n",
    "del model.layers[0]\n",
    "model.layers[0] = nn.Linear(2, 2)\n",
]


def insert_fsdp_code(draw: Draw, module: cst.Module) -> cst.Module:
    suite = draw(st.sampled_from(_suites(module)))
    index = draw(st.integers(0, len(suite.body)))
    statements = list(cst.parse_module(draw(st.sampled_from(FSDP_SNIPPETS))).body)
    return _replace_suite_body(module, suite, lambda body: body[:index] + statements + body[index:])


MUTATIONS = [rename_variable, alias_import, nest, swap_statements, add_comment, odd_whitespace, insert_fsdp_code]


def _lines(text: str) -> list[str]:
    """Lines with their endings, split only where Python ends a line (not at \\f or \\u2028)."""
    return re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", text)


def _with_line_endings(draw: Draw, text: str) -> str:
    style = draw(st.sampled_from(["keep", "crlf", "mixed", "trailing-spaces"]))
    if style == "keep":
        return text
    lines = _lines(text)
    if style == "crlf":
        return "".join(line.replace("\n", "\r\n") for line in lines)
    if style == "mixed":
        flags = draw(st.lists(st.booleans(), min_size=len(lines), max_size=len(lines)))
        return "".join(line.replace("\n", "\r\n") if flag else line for line, flag in zip(lines, flags))
    return "".join(line[:-1] + " \t\n" if line.endswith("\n") and not line.endswith("\\\n") else line for line in lines)


@functools.lru_cache(maxsize=None)
def _parsed(path: Path) -> cst.Module:
    return cst.parse_module(path.read_text())  # LibCST trees are immutable: one parse serves every example


@st.composite
def mutated_fixture(draw) -> tuple[str, str]:
    """(fixture name, source): a fixture's bad.py after a few mutations."""
    path = draw(st.sampled_from(BAD_FIXTURES))
    module = _parsed(path)
    for _ in range(draw(st.integers(1, 5))):
        module = draw(st.sampled_from(MUTATIONS))(draw, module)
    if draw(st.booleans()):
        module = module.with_changes(default_indent=draw(st.sampled_from(["\t", "  ", "        "])))
    return path.parent.name, _with_line_endings(draw, module.code)


# The proof that a fix changed only the nodes it names.


class ChangedOutsideFix(AssertionError):
    pass


def assert_changes_only_named_nodes(file: FileModel, fix: Fix, fixed: str) -> None:
    """Every line that differs between the file and `fixed` belongs to a node the fix names.

    A replaced node may change its own lines (and on a one-line node, only its own columns); an
    inserted statement may only appear next to the statement it is inserted before or after (past
    blank and comment lines); a moved statement (with the comment lines it owns) must appear, unchanged,
    after its anchor; an added import may appear as a line of its own or join the file's own
    `from module import ...` line; an import a fix drops when unused may change or go. Everything else
    is compared byte for byte.
    """
    before = _lines(file.source.text)
    after = _lines(fixed)
    changeable: set[int] = set()  # 0-based lines of `before` that may change or go
    insertable: set[int] = set()  # 0-based line boundaries (insert before line i) where lines may appear
    columns: dict[int, list[tuple[int, int]]] = {}  # line -> spans of one-line replaced nodes
    moved: set[int] = set()
    imports = any(isinstance(op, AddImport) for op in fix.operations)

    def span(node: cst.CSTNode) -> tuple[int, int]:
        position = file.position(node)
        first = position.start.line - 1 - len(getattr(node, "leading_lines", ()))
        return first, position.end.line - 1

    def padding_below(last: int, lines: list[str]) -> int:
        while last + 1 < len(lines) and lines[last + 1].strip()[:1] in ("", "#"):
            last += 1
        return last

    def from_import_lines(matches) -> Iterator[int]:
        """The lines of the file's top-level `from ... import ...` statements that `matches`."""
        for statement in file.module.body:
            if isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], cst.ImportFrom):
                if matches(statement.body[0]):
                    position = file.position(statement)
                    yield from range(position.start.line - 1, position.end.line)

    for operation in fix.operations:
        if isinstance(operation, AddImport) and operation.names:
            changeable.update(from_import_lines(lambda node: node.module is not None and not node.relative
                                                and dotted_name(node.module) == operation.module))
        elif isinstance(operation, DropImportIfUnused):
            name = operation.qualified.rpartition(".")[2]
            changeable.update(from_import_lines(lambda node: not isinstance(node.names, cst.ImportStar)
                                                and any(dotted_name(alias.name) == name for alias in node.names)))
        elif isinstance(operation, Replace):
            position = file.position(operation.node)
            first, last = position.start.line - 1, position.end.line - 1
            changeable.update(range(first, last + 1))
            insertable.update(range(first, last + 2))
            if first == last:
                columns.setdefault(first, []).append((position.start.column, position.end.column))
        elif isinstance(operation, InsertBefore):
            first, _ = span(operation.statement)
            insertable.update(range(first, file.position(operation.statement).start.line))
        elif isinstance(operation, InsertAfter):
            _, last = span(operation.statement)
            insertable.update(range(last + 1, padding_below(last, before) + 2))
        elif isinstance(operation, MoveAfter):
            first, last = span(operation.statement)
            block = before[first:last + 1]
            _, anchor_last = span(operation.anchor)
            anchor = before[anchor_last]
            # In `fixed`, the block follows the anchor's last line (past blank and comment lines).
            landing = [k for k in range(1, len(after) - len(block) + 1)
                       if after[k:k + len(block)] == block and after[_last_code_line(after, k)] == anchor]
            if not landing:
                raise ChangedOutsideFix(f"the moved statement is not right after its anchor:\n{''.join(block)}")
            after = after[:landing[0]] + after[landing[0] + len(block):]
            moved.update(range(first, last + 1))

    kept = [i for i in range(len(before)) if i not in moved]  # lines of `before` left after the moves
    remaining = [before[i] for i in kept]

    def original_boundaries(k: int) -> set[int]:
        """The boundaries of `before` that boundary k of `remaining` stands for (moves join some)."""
        low = kept[k - 1] + 1 if k > 0 else 0
        high = kept[k] if k < len(kept) else len(before)
        return set(range(low, high + 1))

    def is_import(line: str) -> bool:
        return line.lstrip().startswith(("from ", "import "))

    matcher = difflib.SequenceMatcher(None, remaining, after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        gone = {kept[i] for i in range(i1, i2)} - changeable
        if tag in ("delete", "replace") and gone:
            raise ChangedOutsideFix(f"lines {sorted(n + 1 for n in gone)} changed outside the fix's nodes:\n{''.join(remaining[i1:i2])}->\n{''.join(after[j1:j2])}")
        boundaries = original_boundaries(i1) | original_boundaries(i2)
        if tag == "insert" and not (boundaries & insertable or imports and all(is_import(line) for line in after[j1:j2])):
            raise ChangedOutsideFix(f"lines inserted at line {kept[i1] + 1 if i1 < len(kept) else len(before)}, away from the fix's nodes:\n{''.join(after[j1:j2])}")
        if tag == "replace" and i2 - i1 == j2 - j1:
            for offset, (old, new) in enumerate(zip(remaining[i1:i2], after[j1:j2])):
                for start, end in columns.get(kept[i1 + offset], []):
                    if not (new.startswith(old[:start]) and new.endswith(old[end:])):
                        raise ChangedOutsideFix(f"line {kept[i1 + offset] + 1} changed outside columns {start}-{end}:\n{old}->\n{new}")


def _last_code_line(lines: list[str], k: int) -> int:
    """The index of the last line before k that is not blank or a comment (or 0)."""
    k -= 1
    while k > 0 and lines[k].strip()[:1] in ("", "#"):
        k -= 1
    return k
