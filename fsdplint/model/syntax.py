"""LibCST shapes the model reads statements and expressions by, without LibCST's costly generic visitors."""

from __future__ import annotations

from typing import Callable, Iterator

import libcst as cst

from fsdplint.model.names import CONSTANTS, dotted_name


def statements_of(suite: cst.CSTNode) -> list[cst.CSTNode]:
    """The statements of a block or of a module's body."""
    if type(suite) in (cst.IndentedBlock, cst.Module):
        return list(suite.body)
    return [cst.SimpleStatementLine(suite.body)] if type(suite) is cst.SimpleStatementSuite else []


def suites_of(statement: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The blocks of a compound statement, in order."""
    if type(statement) is cst.If:
        yield statement.body
        if type(statement.orelse) is cst.If:
            yield from suites_of(statement.orelse)
        elif statement.orelse is not None:
            yield statement.orelse.body
    elif type(statement) in (cst.For, cst.While):
        yield statement.body
        if statement.orelse is not None:
            yield statement.orelse.body
    elif type(statement) is cst.With:
        yield statement.body
    elif type(statement) in (cst.Try, cst.TryStar):
        yield statement.body
        for handler in statement.handlers:
            yield handler.body
        if statement.orelse is not None:
            yield statement.orelse.body
        if statement.finalbody is not None:
            yield statement.finalbody.body
    elif type(statement) is cst.Match:
        for case in statement.cases:
            yield case.body


def string_value(node: cst.SimpleString) -> str | bytes:
    """The string a literal spells: its text between the quotes where no escape or prefix changes it,
    else LibCST's `evaluated_value`. (That one calls `ast.literal_eval`, whose nested functions are
    garbage in a cycle after every call: tens of thousands of them in a run with the collector off.)"""
    prefix = node.prefix
    if prefix in ("r", "R") or prefix in ("", "u", "U") and "\\" not in node.value:
        return node.raw_value
    return node.evaluated_value


def target_names(node: cst.CSTNode) -> Iterator[str]:
    """The names an assignment target binds (`a`, `a, (b, *c)`)."""
    if type(node) is cst.Name:
        yield node.value
    elif type(node) in (cst.Tuple, cst.List):
        for element in node.elements:
            yield from target_names(element.value)
    elif type(node) is cst.StarredElement:
        yield from target_names(node.value)


def bound_names(statements) -> Iterator[str]:
    """Every name the statements bind (assignments, loop targets, `with ... as`), nested blocks
    included, nested functions and classes not."""
    for statement in statements:
        if type(statement) is cst.SimpleStatementLine:
            for small in statement.body:
                if type(small) is cst.Assign:
                    for target in small.targets:
                        yield from target_names(target.target)
                elif type(small) in (cst.AnnAssign, cst.AugAssign):
                    yield from target_names(small.target)
        elif type(statement) in (cst.FunctionDef, cst.ClassDef):
            continue
        else:
            if type(statement) is cst.For:
                yield from target_names(statement.target)
            if type(statement) is cst.With:
                for item in statement.items:
                    if item.asname:
                        yield from target_names(item.asname.name)
            for suite in suites_of(statement):
                yield from bound_names(statements_of(suite))


def small_statements(statements) -> Iterator[cst.BaseSmallStatement]:
    """Every small statement of the body (`x = 1`, `global x`, a call), nested blocks included, nested
    functions and classes not."""
    for statement in statements:
        if type(statement) is cst.SimpleStatementLine:
            yield from statement.body
        elif type(statement) not in (cst.FunctionDef, cst.ClassDef):
            for suite in suites_of(statement):
                yield from small_statements(statements_of(suite))


def declared_global(statements) -> Iterator[str]:
    """The names a `global` statement of the body declares (nested functions and classes not)."""
    for small in small_statements(statements):
        if type(small) is cst.Global:
            yield from (item.name.value for item in small.names)


def runs_exec_in_scope(statements) -> bool:
    """Some statement of the body (nested functions and classes not) is a call of `exec` in the body's
    own names: nanoGPT's `exec(open("configurator.py").read())` at the top level sets any global again."""
    return any(type(small) is cst.Expr and type(small.value) is cst.Call and _execs_in_own_names(small.value) for small in small_statements(statements))


def _execs_in_own_names(call: cst.Call) -> bool:
    """`exec(code)` or `exec(code, globals())`; not `exec(code, namespace)`, which sets the namespace's."""
    if type(call.func) is not cst.Name or call.func.value != "exec" or not call.args or any(arg.star or arg.keyword for arg in call.args):
        return False
    return len(call.args) == 1 or type(call.args[1].value) is cst.Call and dotted_name(call.args[1].value.func) == "globals"


def parameter_default(function: cst.FunctionDef, name: str) -> cst.BaseExpression | None:
    """The default of the named parameter, as written."""
    for param in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params):
        if param.name.value == name:
            return param.default
    return None


def literal_default(function: cst.FunctionDef, name: str) -> str | None:
    """"None", "True", "False" or a number as written (`-1`, `-1.0`) when the parameter's default is that literal."""
    default = parameter_default(function, name)
    return default.value if type(default) is cst.Name and default.value in CONSTANTS else number_literal(default)


def number_literal(node: cst.CSTNode | None) -> str | None:
    """A number literal as written, its sign included (`0`, `-1`, `-1.0`, `1e-4`); None for anything else."""
    if type(node) is cst.UnaryOperation and type(node.operator) is cst.Minus and type(node.expression) in (cst.Integer, cst.Float):
        return "-" + node.expression.value
    return node.value if type(node) in (cst.Integer, cst.Float) else None


def integer_literal(node: cst.CSTNode | None) -> str | None:
    """An integer literal as written, its sign included (`0`, `-1`: a rank of -1 means none); None for anything else."""
    if type(node) is cst.UnaryOperation and type(node.operator) is cst.Minus and type(node.expression) is cst.Integer:
        return "-" + node.expression.value
    return node.value if type(node) is cst.Integer else None


def string_default(function: cst.FunctionDef, name: str) -> str | None:
    """The text of the parameter's default when it is a string literal (`host="localhost"`)."""
    default = parameter_default(function, name)
    text = string_value(default) if type(default) is cst.SimpleString else None
    return text if isinstance(text, str) else None


def environment_variable(target: cst.CSTNode, file) -> str | None:
    """`MASTER_ADDR` for the assignment target `os.environ["MASTER_ADDR"]`."""
    if type(target) is not cst.Subscript or len(target.slice) != 1 or file.qualify(target.value) != "os.environ":
        return None
    index = target.slice[0].slice
    name = string_value(index.value) if type(index) is cst.Index and type(index.value) is cst.SimpleString else None
    return name if isinstance(name, str) else None


def returned_names(suite: cst.CSTNode, known_test: Callable[[cst.CSTNode], bool | None] = lambda test: None) -> Iterator[str | None]:
    """What each `return` of a block returns, through its `if`/`else`, `try` and `with` blocks (not
    into nested functions): the name returned, or None for anything else. Of an `if` whose test
    `known_test` knows the value of, only the arm that runs."""
    for statement in statements_of(suite):
        if type(statement) is cst.SimpleStatementLine:
            for small in statement.body:
                if type(small) is cst.Return:
                    yield small.value.value if type(small.value) is cst.Name else None
        elif type(statement) is cst.If and (truth := known_test(statement.test)) is not None:
            arm = statement.body if truth else statement.orelse
            if type(arm) is cst.If:
                yield from returned_names(cst.IndentedBlock([arm]), known_test)
            elif arm is not None:
                yield from returned_names(arm.body, known_test)
        elif type(statement) not in (cst.FunctionDef, cst.ClassDef):
            for inner in suites_of(statement):
                yield from returned_names(inner, known_test)


def decorator_name(decorator: cst.Decorator) -> str:
    """`rank_zero_only` for `@rank_zero_only`, `@utils.rank_zero_only` and `@accelerator.on_main_process(...)`."""
    node = decorator.decorator.func if type(decorator.decorator) is cst.Call else decorator.decorator
    return (dotted_name(node) or "").rsplit(".", 1)[-1]


_PATCHERS = frozenset({"unittest.mock.patch", "mock.patch", "unittest.mock.patch.object", "mock.patch.object"})


def patched_names(function: cst.FunctionDef, file) -> Iterator[str]:
    """The names of what a test replaces: with mocks, by its `@patch("pkg.mod.name")` /
    `@patch(f"{__name__}.name")` / `@patch.object(obj, "name")` decorators, or with fakes, by pytest's
    `monkeypatch.setattr(obj, "name", fake)` / `monkeypatch.setattr("pkg.mod.name", fake)` among the
    statements of its body (for the whole test, as a decorator's patch is)."""
    for decorator in function.decorators:
        call = decorator.decorator
        if type(call) is not cst.Call or file.qualify(call.func) not in _PATCHERS or not call.args:
            continue
        target = call.args[1].value if (file.qualify(call.func) or "").endswith(".object") and len(call.args) > 1 else call.args[0].value
        yield from _patched_name(target)
    params = {param.name.value for param in function.params.params}
    if "monkeypatch" not in params:
        return
    for statement in statements_of(function.body):
        call = statement.body[0].value if type(statement) is cst.SimpleStatementLine and type(statement.body[0]) is cst.Expr else None
        if type(call) is cst.Call and dotted_name(call.func) == "monkeypatch.setattr" and len(call.args) in (2, 3):
            yield from _patched_name(call.args[1].value if len(call.args) == 3 else call.args[0].value)


def _patched_name(target: cst.CSTNode) -> Iterator[str]:
    """The name a patch target spells last: `"pkg.mod.name"`, `f"{__name__}.name"`, `"name"`."""
    if type(target) is cst.SimpleString:
        yield str(string_value(target)).rsplit(".", 1)[-1]
    elif type(target) is cst.FormattedString and target.parts and type(target.parts[-1]) is cst.FormattedStringText:
        yield target.parts[-1].value.rsplit(".", 1)[-1]


def parse_module(text: str) -> cst.Module:
    """`cst.parse_module` without LibCST's check of each node it builds (`CSTNode.__post_init__`
    validates the node's own invariants, which the parser's output always meets; LibCST's comment there
    says as much). A fifth of the parse time; nodes built elsewhere (a fix's code) are still checked."""
    validating = cst.CSTNode.__post_init__
    cst.CSTNode.__post_init__ = _trusted  # type: ignore[method-assign]
    try:
        return cst.parse_module(text)
    finally:
        cst.CSTNode.__post_init__ = validating  # type: ignore[method-assign]


def _trusted(node: cst.CSTNode) -> None:
    """A node the parser built: already valid."""


_REGISTERS = frozenset({"register_parameter", "register_module", "add_module"})
_LITERALS = (cst.Integer, cst.Float, cst.SimpleString, cst.Imaginary)
# Builtins whose result is a number, a string or a bool: never a module or a parameter.
_SCALAR_BUILTINS = frozenset({"float", "int", "bool", "str", "len", "round", "abs"})


def own_attributes(class_def: cst.ClassDef) -> set[str] | None:
    """The attributes a class's methods may hold anything in: each `self.NAME = value` whose value is
    no literal (a number, a string, None, True, False) nor a builtin's scalar (`float(weight)`). None when a method can add what this does not
    see: `setattr(self, ...)`, `self.register_parameter(...)`, `self.add_module(...)`."""
    names: set[str] = set()
    pending = list(class_def.body.body) if type(class_def.body) is cst.IndentedBlock else []
    while pending:
        statement = pending.pop()
        if type(statement) in (cst.FunctionDef, cst.ClassDef):
            if type(statement) is cst.FunctionDef and type(statement.body) is cst.IndentedBlock:
                pending += statement.body.body
            continue
        if type(statement) is not cst.SimpleStatementLine:
            pending += [inner for suite in suites_of(statement) for inner in statements_of(suite)]
            continue
        for small in statement.body:
            call = small.value if type(small) is cst.Expr else None
            if type(call) is cst.Call and (dotted_name(call.func) == "setattr" or type(call.func) is cst.Attribute and call.func.attr.value in _REGISTERS):
                return None
            targets = [target.target for target in small.targets] if type(small) is cst.Assign else \
                [small.target] if type(small) is cst.AnnAssign and small.value is not None else []
            value = getattr(small, "value", None)
            literal = type(value) in _LITERALS or type(value) is cst.Name and value.value in CONSTANTS \
                or type(value) is cst.Call and type(value.func) is cst.Name and value.func.value in _SCALAR_BUILTINS
            while targets:
                target = targets.pop()
                if type(target) in (cst.Tuple, cst.List):
                    targets += [element.value for element in target.elements]
                    literal = False  # what each name is given is not read here
                elif type(target) is cst.Attribute and type(target.value) is cst.Name and target.value.value == "self" and not literal:
                    names.add(target.attr.value)
    return names


def falsy_defaults(function: cst.FunctionDef) -> set[str]:
    """Parameters whose default is `False` or `None`."""
    params = (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)
    return {p.name.value for p in params if type(p.default) is cst.Name and p.default.value in ("False", "None")}


def isinstance_classes(call: cst.Call) -> list[cst.CSTNode]:
    """The classes `isinstance(x, C)` or `isinstance(x, (C, D))` tests against, as written."""
    classes = call.args[1].value
    return [element.value for element in classes.elements] if type(classes) is cst.Tuple else [classes]


def parts_that_hold(test: cst.CSTNode, holds: bool) -> Iterator[tuple[cst.CSTNode, bool]]:
    """The test and what follows of its parts where it has truth `holds`: `not` folded in, each part
    of `a and b` where it is true, of `a or b` where it is false."""
    while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        test, holds = test.expression, not holds
    yield test, holds
    if type(test) is cst.BooleanOperation and type(test.operator) is (cst.And if holds else cst.Or):
        yield from parts_that_hold(test.left, holds)
        yield from parts_that_hold(test.right, holds)


_ENDS_PROCESS = frozenset({"sys.exit", "exit", "quit", "os._exit"})


def exits_block(suite: cst.CSTNode) -> bool:
    """The block ends in `return`, `raise`, `continue`, `break` or `sys.exit()`: what follows it runs
    only where its test failed."""
    body = statements_of(suite)
    last = body[-1].body[-1] if body and type(body[-1]) is cst.SimpleStatementLine else None
    return isinstance(last, (cst.Return, cst.Raise, cst.Continue, cst.Break)) \
        or type(last) is cst.Expr and type(last.value) is cst.Call and dotted_name(last.value.func) in _ENDS_PROCESS


def leaves_a_loop(suite: cst.CSTNode) -> bool:
    """The block holds a `break` or `continue` of a loop around it (not of a loop inside it): a path
    through it may leave it without returning. An `else:` clause or an `elif` is read as its blocks."""
    if type(suite) is cst.Else:
        suite = suite.body
    for statement in [suite] if type(suite) is cst.If else statements_of(suite):
        if type(statement) is cst.SimpleStatementLine:
            if any(type(small) in (cst.Break, cst.Continue) for small in statement.body):
                return True
        elif type(statement) in (cst.For, cst.While):
            if statement.orelse is not None and leaves_a_loop(statement.orelse.body):
                return True
        elif type(statement) not in (cst.FunctionDef, cst.ClassDef) and any(map(leaves_a_loop, suites_of(statement))):
            return True
    return False


def no_statements() -> None:
    """An arm with no statements: an `if` without `else`."""


def else_arm_exits(node: cst.If) -> bool:
    """Every path through the `else` (each arm of an `elif` chain) exits the block."""
    if type(node.orelse) is cst.If:
        return exits_block(node.orelse.body) and else_arm_exits(node.orelse)
    return node.orelse is not None and exits_block(node.orelse.body)


LITERAL_COLLECTIONS = (cst.Tuple, cst.List, cst.Set)


def is_sign_test(target: cst.ComparisonTarget) -> bool:
    """`>= 0`, `> -1`, `< 0`, `<= -1`: whether a rank is negative, which is the same on every rank."""
    operator, bound = type(target.operator), target.comparator
    zero = type(bound) is cst.Integer and bound.value == "0"
    return operator in (cst.GreaterThanEqual, cst.LessThan) and zero or operator in (cst.GreaterThan, cst.LessThanEqual) and integer_literal(bound) == "-1"


def is_group_range(node: cst.Comparison) -> bool:
    """`lo <= rank < hi` with bounds computed, not written: the ranks of a group."""
    ordering = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)
    bounds = (node.left, node.comparisons[-1].comparator)
    return (len(node.comparisons) == 2 and all(type(target.operator) in ordering for target in node.comparisons)
            and not all(type(bound) is cst.Integer for bound in bounds))


def runs_forever(statement: cst.CSTNode) -> bool:
    """`while True:` (or `while 1:`) that nothing in its body leaves normally: no `break` of its own, no
    `return`, no exit call (a server's loop, which may still stop by an error it raises); or a `with`
    block that reaches one at its top level (Lumina's `with torch.autocast(...): while True:`). Code
    after it never runs, and a function that reaches it never returns."""
    if type(statement) is cst.With:
        return any(runs_forever(inner) for inner in statements_of(statement.body))
    if type(statement) is not cst.While or not (type(statement.test) is cst.Name and statement.test.value == "True"
                                                 or type(statement.test) is cst.Integer and statement.test.value != "0"):
        return False
    pending: list[tuple[cst.CSTNode, bool]] = [(child, False) for child in statement.body.children]
    while pending:
        node, in_inner_loop = pending.pop()
        if type(node) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            continue  # its own code, run only where called
        if type(node) is cst.Return or type(node) is cst.Break and not in_inner_loop:
            return False
        if type(node) is cst.Call and dotted_name(node.func) in _ENDS_PROCESS:
            return False
        inner = in_inner_loop or type(node) in (cst.For, cst.While)
        pending.extend((child, inner) for child in node.children)
    return True


def is_whole_statement(statement: cst.CSTNode, node: cst.CSTNode) -> bool:
    """`node` is the whole expression of the one-statement line `statement` (`x = f(m)`, `f(m)`,
    `return f(m)`): it runs wherever the statement does, not on one side of `a if c else b` or of
    `c and f(m)`."""
    if type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1:
        return False
    small = statement.body[0]
    return type(small) in (cst.Assign, cst.AnnAssign, cst.Expr, cst.Return) and small.value is node


def holds_statement(suite: cst.BaseSuite, statement: cst.CSTNode) -> bool:
    """Whether `statement` is one of the block's own statements."""
    return type(suite) is cst.IndentedBlock and any(s is statement for s in suite.body)


_LEAVES = (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.Ellipsis)


def subexpressions(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The expressions directly inside `node`, without LibCST's costly generic `children`."""
    if type(node) in _LEAVES:
        return []
    if type(node) in (cst.BinaryOperation, cst.BooleanOperation, cst.ConcatenatedString):
        return [node.left, node.right]
    if type(node) is cst.Comparison:
        return [node.left, *(target.comparator for target in node.comparisons)]
    if type(node) in (cst.UnaryOperation, cst.Await):
        return [node.expression]
    if type(node) is cst.IfExp:
        return [node.test, node.body, node.orelse]
    if type(node) is cst.Dict:
        return [part for element in node.elements for part in ((element.key, element.value) if type(element) is cst.DictElement else (element.value,))]
    if type(node) in (cst.Set, cst.Tuple, cst.List):
        return [element.value for element in node.elements]
    if type(node) is cst.FormattedString:
        return [part.expression for part in node.parts if type(part) is cst.FormattedStringExpression]
    if type(node) in (cst.StarredElement, cst.NamedExpr, cst.Yield, cst.Expr):
        return [node.value] if node.value is not None else []
    return [child for child in node.children if isinstance(child, cst.BaseExpression)]


def nodes_under(node: cst.CSTNode, kind: type[cst.CSTNode]) -> Iterator[cst.CSTNode]:
    """The nodes of type `kind` in the code under `node` (itself included)."""
    pending = [node]
    while pending:
        current = pending.pop()
        if type(current) is kind:
            yield current
        pending.extend(current.children)


def reads_name(node: cst.CSTNode, name: str) -> bool:
    """Whether the code under `node` mentions the name `name` (a policy function that reads `recurse`)."""
    return any(found.value == name for found in nodes_under(node, cst.Name))


def arguments_fit(function: cst.FunctionDef, call: cst.Call) -> bool:
    """The call's arguments bind to the function's parameters: no more positional arguments than it
    takes, no keyword it does not take, no parameter without a default left out. Where they do not, the
    call raises TypeError before the body runs (carbonscott/maxie's example scripts call an
    `init_logger` whose signature changed). True where a `*` or `**` argument hides what is given."""
    if any(arg.star for arg in call.args):
        return True
    params = function.params
    positional = [*params.posonly_params, *params.params]
    given = sum(arg.keyword is None for arg in call.args)
    keywords = {arg.keyword.value for arg in call.args if arg.keyword is not None}
    if given > len(positional) and not isinstance(params.star_arg, cst.Param):
        return False
    if not isinstance(params.star_kwarg, cst.Param) and keywords - {param.name.value for param in (*params.params, *params.kwonly_params)}:
        return False
    filled = {param.name.value for param in positional[:given]} | keywords
    return all(param.default is not None or param.name.value in filled for param in (*positional, *params.kwonly_params))
