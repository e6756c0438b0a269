"""Property-based fuzzing of the whole pipeline and of the fixer.

For any input fsdplint neither crashes nor hangs, and says when the file is not Python. For the FSDP
fixtures, mutated in ways that keep them valid Python (renames, aliased imports, code nested in
functions, classes, loops, with and try, reordered statements, comments, odd whitespace and line
endings), every fix's output parses, fixing twice equals fixing once, and each fix changes only the
nodes it names. The budget is small in the normal run; see README, Testing, for the long run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import hypothesmith
import libcst as cst
import pytest
from fuzzing import BAD_FIXTURES, FIXTURES, assert_changes_only_named_nodes, fuzz_settings, mutated_fixture, no_hang
from hypothesis import event, example, given
from hypothesis import strategies as st

from fsdplint import reporters
from fsdplint.config import Settings
from fsdplint.engine import Engine, Result
from fsdplint.fixes import apply_fixes
from fsdplint.registry import all_rules
from fsdplint.source import SourceError, decode_source

TRIGGER = "from torch.distributed.fsdp import fully_shard\n"
RULESET = all_rules()


def pipeline(data: bytes, fix: bool) -> Result | None:
    """What `fsdplint check [--fix --unsafe-fixes]` does with one file, in memory, every output format
    rendered. None when the bytes are not Python source (the CLI reports that as FSDP002)."""
    try:
        source = decode_source(data, Path("fuzzed.py"), "fuzzed.py")
    except SourceError:
        return None
    engine = Engine(RULESET, RULESET.rules, Settings())
    with no_hang():
        result = engine.check({source.display: source}, [], fix=fix, unsafe_fixes=True)
        for render in reporters.FORMATS.values():
            render(result.diagnostics, RULESET)
    return result


def codes(result: Result) -> set[str]:
    return {d.code for d in result.diagnostics}


def python_accepts(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def libcst_accepts(text: str) -> bool:
    try:
        cst.parse_module(text)
    except Exception:
        return False
    return True


def assert_sound(text: str, result: Result) -> None:
    """No internal error; a syntax error is reported exactly when neither parser accepts a file that
    is analyzed (one without a rule's trigger token is never parsed, by design)."""
    for code in sorted(codes(result)):
        event(f"reported {code}")  # counted by --hypothesis-show-statistics
    assert "FSDP009" not in codes(result), [d.message for d in result.diagnostics if d.code == "FSDP009"]
    if python_accepts(text):
        assert "FSDP001" not in codes(result), [d.message for d in result.diagnostics]
        if "FSDP002" in codes(result):  # valid Python beyond libcst: said so, not called a syntax error
            assert not libcst_accepts(text)
    elif "fully_shard" in text and not libcst_accepts(text):
        assert "FSDP001" in codes(result)


def assert_fix_sound(result: Result) -> None:
    """The fixed text parses and a second fix changes nothing."""
    assert "FSDP005" not in codes(result), [d.message for d in result.diagnostics]
    for _, fixed in result.changed():
        assert python_accepts(fixed.text), fixed.text
        again = pipeline(fixed.encode(fixed.text), fix=True)
        assert again.sources[fixed.display].text == fixed.text, "fixing twice differs from fixing once"


def assert_checks_and_fixes_sound(text: str) -> None:
    """Checking is sound; each fix alone parses and changes only the nodes it names; fixing them
    all parses and is idempotent."""
    result = pipeline(text.encode(), fix=False)
    assert_sound(text, result)
    for diagnostic in result.diagnostics:
        if diagnostic.fix is not None:
            fixed = apply_fixes(diagnostic.file, [diagnostic.fix])
            assert python_accepts(fixed), f"{diagnostic.code} fix does not parse:\n{fixed}"
            assert_changes_only_named_nodes(diagnostic.file, diagnostic.fix, fixed)
            event(f"proved the fix of {diagnostic.code}")
    assert_fix_sound(pipeline(text.encode(), fix=True))


@pytest.mark.filterwarnings("ignore::SyntaxWarning")  # hypothesmith compiles what it generates
@fuzz_settings(ci_examples=120)
@given(st.one_of(hypothesmith.from_grammar(), hypothesmith.from_node()), st.sampled_from([None, *BAD_FIXTURES]))
@example("class A:\n\f pass\n", FIXTURES / "FSDP105" / "bad.py")  # found by the fuzzer: a form feed in the first indent
@example("class A:\\\r \n pass\n", FIXTURES / "FSDP201" / "bad.py")  # found by the fuzzer: `\` + lone \r as first line ending
def test_generated_programs(program: str, fixture: Path | None) -> None:
    """A generated program alone, or followed by a fixture (odd definitions before FSDP code)."""
    text = TRIGGER + program if fixture is None else program + "\n" + fixture.read_text()
    assert_checks_and_fixes_sound(text)


@fuzz_settings(ci_examples=500)
@given(st.one_of(st.binary(), st.text().map(str.encode), st.binary().map(TRIGGER.encode().__add__), st.text().map(lambda t: (TRIGGER + t).encode())))
@example(b"\xef\xbb\xbf" + TRIGGER.encode() + b"x = (\r\n1)\r")
@example(TRIGGER.encode() + b"def f(:\n")
@example(TRIGGER.encode() + b"\n\\\r\n")  # found by the fuzzer: valid Python that libcst rejects
def test_arbitrary_bytes(data: bytes) -> None:
    result = pipeline(data, fix=True)
    if result is None:
        return
    text = result.original["fuzzed.py"].text
    assert_sound(text, result)
    if python_accepts(text):
        assert_fix_sound(result)


@fuzz_settings(ci_examples=150)
@given(mutated_fixture())
def test_mutated_fixtures(fixture: tuple[str, str]) -> None:
    name, text = fixture
    assert python_accepts(text), f"the mutator must keep {name}'s code valid"
    assert_checks_and_fixes_sound(text)


def test_the_proof_catches_changes_outside_the_fix() -> None:
    """The check the fuzzer relies on is not vacuous: it rejects a change next to a correct fix."""
    from fuzzing import ChangedOutsideFix

    forward = next(path for path in BAD_FIXTURES if path.parent.name == "FSDP103").read_text()
    result = pipeline(forward.encode(), fix=False)
    diagnostic = next(d for d in result.diagnostics if d.code == "FSDP103")
    fixed = apply_fixes(diagnostic.file, [diagnostic.fix])
    assert_changes_only_named_nodes(diagnostic.file, diagnostic.fix, fixed)
    for tampered in [
        fixed.replace("losses = []", "losses = [] "),  # another line
        fixed.replace("out = model(x)", "out  = model(x)"),  # the same line, outside the node
        fixed.replace("  # expect: FSDP103", ""),  # the comment after the node
        fixed.replace("optimizer.step()\n", "optimizer.step()\n    pass\n"),  # a line inserted elsewhere
    ]:
        assert tampered != fixed
        with pytest.raises(ChangedOutsideFix):
            assert_changes_only_named_nodes(diagnostic.file, diagnostic.fix, tampered)

    order = next(path for path in BAD_FIXTURES if path.parent.name == "FSDP102").read_text()
    result = pipeline(order.encode(), fix=False)
    diagnostic = next(d for d in result.diagnostics if d.code == "FSDP102")
    moved = apply_fixes(diagnostic.file, [diagnostic.fix])
    assert_changes_only_named_nodes(diagnostic.file, diagnostic.fix, moved)
    with pytest.raises(ChangedOutsideFix):  # the moved statement lands somewhere else
        assert_changes_only_named_nodes(diagnostic.file, diagnostic.fix, order.replace("fully_shard(model, mesh=mesh)\n", "").replace("before = ", "fully_shard(model, mesh=mesh)\nbefore = "))
