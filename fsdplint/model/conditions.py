"""What holds where an event runs, as formulas over atoms, and whether two such sets can hold at once.

A test (`if is_fsdp:`) is read as a formula of what its names were computed from where the walk bound
them (`is_fsdp = is_distributed and args.dist == "fsdp"`, `is_distributed = world_size != -1`):

- a Ref: the truth of the object a variable of the walk holds, not known further;
- `("eq", subject, literal)`: the subject (a Ref, or an expression's node) equals a literal
  (`args.dist == "fsdp"`, `rank == -1`), written as one text whatever its quotes (`'fsdp'`, `-1`, `None`);
- `("cmp", subject, (operator, number))`: the subject is below or above an integer (`stage >= 2`, one
  of `<`, `<=`, `>`, `>=`), where a number the subject is, is one number: `stage > 0` false and
  `stage >= 2` true never hold together;
- `("not", f)`, `("and", f, g)`, `("or", f, g)`;
- a node: any other test, an atom known by its text.
(The two atoms are kept as they are, not in a tuple: most facts are one of them, and every copy of a
summary maps its facts.)

An event's facts (`Event.facts`) are `(formula, truth)` pairs. Two sets of facts exclude each other
when no truth of their atoms makes every fact hold, where a subject equals one literal at most
(`args.dist == "fsdp"` and `args.dist == "ddp"` never both hold): minGPU's `if is_fsdp: model =
wrap_fsdp(model)` and `if (not is_distributed) or is_ddp: ... model.state_dict()`.
"""

from __future__ import annotations

import functools
import itertools
import operator
from typing import Callable

import libcst as cst

from fsdplint.model.values import Ref

Formula = "Ref | cst.CSTNode | tuple"
MAX_ATOMS = 10  # past it, two sets of facts are not known to exclude each other (2**10 truths at most)
# Whether this process is in a process group, whatever name a test asks it by (`dist.is_initialized()`,
# a flag a constructor stored it in): one atom, so that its facts meet.
GROUP_STARTED: cst.BaseExpression = cst.parse_expression("torch.distributed.is_initialized()")
_WRITER = cst.Module([])  # writes out any expression's node, whichever file holds it


@functools.lru_cache(maxsize=1 << 14)
def written(node: cst.CSTNode) -> str:
    """The expression's text on one line. Kept per node (nodes hash by identity): a test is written
    out again for every event under it, in every flow that walks it (30,000 times in accelerate)."""
    return " ".join(_WRITER.code_for_node(node).split())


def _subject_text(subject: Ref | cst.CSTNode) -> str:
    return subject.dotted() if type(subject) is Ref else written(subject)


def render(formula: Formula) -> str:
    """The formula as one text: two facts with the same text are the same test."""
    if type(formula) is Ref:
        return formula.dotted()
    if type(formula) is not tuple:
        return written(formula)
    kind = formula[0]
    if kind == "eq":
        return f"{_subject_text(formula[1])} == {formula[2]}"
    if kind == "cmp":
        return f"{_subject_text(formula[1])} {formula[2][0]} {formula[2][1]}"
    if kind == "not":
        return f"not {_grouped(formula[1], ('and', 'or', 'eq'))}"
    return f"{_grouped(formula[1], ('and', 'or'))} {kind} {_grouped(formula[2], ('and', 'or'))}"


def _grouped(formula: Formula, kinds: tuple[str, ...]) -> str:
    return f"({render(formula)})" if type(formula) is tuple and formula[0] in kinds else render(formula)


def mapped(formula: Formula, ref: Callable[[Ref], Ref]) -> Formula:
    """The formula with each Ref in it replaced by `ref(it)` (a summary copied into another call)."""
    if type(formula) is Ref:
        return ref(formula)
    if type(formula) is not tuple:
        return formula
    if formula[0] in _COMPARISONS:
        return (formula[0], ref(formula[1]), formula[2]) if type(formula[1]) is Ref else formula
    parts = tuple(mapped(part, ref) for part in formula[1:])
    return formula if all(map(operator.is_, parts, formula[1:])) else (formula[0], *parts)


def shape(formula: Formula | None, ref: Callable[[Ref], object]) -> object:
    """What a calling context keeps of a formula: its structure, each Ref as `ref` numbers it."""
    if formula is None:
        return None
    if type(formula) is Ref:
        return ("var", ref(formula))
    if type(formula) is not tuple:
        return ("node", written(formula))
    if formula[0] in _COMPARISONS:
        return (formula[0], ref(formula[1]) if type(formula[1]) is Ref else written(formula[1]), formula[2])
    return (formula[0], *(shape(part, ref) for part in formula[1:]))


def _atoms(formula: Formula, found: dict[tuple, None], texts: dict[int, str]) -> None:
    if type(formula) is tuple and formula[0] in ("not", "and", "or"):
        for part in formula[1:]:
            _atoms(part, found, texts)
    else:
        found[_atom(formula, texts)] = None


def _atom(formula: Formula, texts: dict[int, str]) -> tuple:
    """The atom a leaf of a formula is, by text (each node written once per question: `texts`)."""
    if type(formula) is Ref:
        return ("var", formula.dotted())
    subject = formula[1] if type(formula) is tuple else formula
    if type(subject) is Ref:
        text = subject.dotted()
    else:
        text = texts.get(id(subject))
        if text is None:
            text = texts[id(subject)] = written(subject)
    return (formula[0], text, formula[2]) if type(formula) is tuple else ("node", text)


def _key(atom: tuple) -> tuple:
    """What ties atoms: a subject compared with a literal stands for all its comparisons (`dist ==
    "ddp"` ties to `dist == "fsdp"`, `stage > 0` to `stage >= 2`)."""
    return ("subject", atom[1]) if atom[0] in _COMPARISONS else atom


def _compiled(formula: Formula, bits: dict[tuple, int], texts: dict[int, str]) -> Callable[[int], bool]:
    """The formula as a function of the atoms' truths, one bit each."""
    kind = formula[0] if type(formula) is tuple else None
    if kind == "not":
        inner = _compiled(formula[1], bits, texts)
        return lambda truth: not inner(truth)
    if kind in ("and", "or"):
        left, right = _compiled(formula[1], bits, texts), _compiled(formula[2], bits, texts)
        return (lambda truth: left(truth) and right(truth)) if kind == "and" else (lambda truth: left(truth) or right(truth))
    bit = 1 << bits[_atom(formula, texts)]
    return lambda truth: bool(truth & bit)


def can_hold_together(mine: tuple[tuple[Formula, bool], ...], theirs: tuple[tuple[Formula, bool], ...]) -> bool:
    """Some truth of the atoms makes every fact of both sets hold, a subject equal to one literal at
    most. Each set holds on its own (it is what holds on a path): only the facts tied to an atom of
    the other set (through atoms they share) are weighed. True where there are too many atoms to tell."""
    texts: dict[int, str] = {}
    atoms_of = []
    for formula, holds in mine + theirs:
        found: dict[tuple, None] = {}
        _atoms(formula, found, texts)
        atoms_of.append(set(found))
    keys = [{_key(atom) for atom in atoms} for atoms in atoms_of]
    mine_keys = set().union(*keys[:len(mine)])
    theirs_keys = set().union(*keys[len(mine):])
    tied = mine_keys & theirs_keys
    if not tied:
        return True
    # The facts tied to both sets, through the atoms they share, to a fixed point.
    chosen: set[int] = set()
    while True:
        more = {index for index, key in enumerate(keys) if index not in chosen and key & tied}
        if not more:
            break
        chosen |= more
        tied = tied.union(*(keys[index] for index in more))
    return satisfiable([(mine + theirs)[index] for index in sorted(chosen)], texts)


def can_hold(facts: tuple[tuple[Formula, bool], ...]) -> bool:
    """Some truth of the atoms makes every fact of the set hold (the tests around an event: whether it
    can run at all), weighed part by part: facts that share no atom, through others, are apart."""
    texts: dict[int, str] = {}
    parts: list[tuple[set, list]] = []  # the atoms' keys of each part, and its facts
    for fact in facts:
        found: dict[tuple, None] = {}
        _atoms(fact[0], found, texts)
        keys = {_key(atom) for atom in found}
        joined = [part for part in parts if part[0] & keys]
        parts = [part for part in parts if not part[0] & keys] + [(keys.union(*(part[0] for part in joined)), [fact] + [f for part in joined for f in part[1]])]
    return all(satisfiable(part_facts, texts) for _, part_facts in parts)


def satisfiable(facts, texts: dict[int, str] | None = None) -> bool:
    """Some truth of the atoms makes every fact hold, a subject equal to one literal at most. True
    where there are too many atoms to tell."""
    texts = {} if texts is None else texts
    found: dict[tuple, None] = {}
    for formula, _ in facts:
        _atoms(formula, found, texts)
    atoms = sorted(found)
    if len(atoms) > MAX_ATOMS:
        return True
    bits = {atom: position for position, atom in enumerate(atoms)}
    compiled = [(_compiled(formula, bits, texts), holds) for formula, holds in facts]
    # Truths in which a subject equals two literals are not weighed, nor those no one number meets.
    clashes = []
    by_subject: dict[str, list[int]] = {}
    compared: dict[str, list[tuple[int, tuple]]] = {}
    for atom, position in bits.items():
        if atom[0] == "eq":
            by_subject.setdefault(atom[1], []).append(position)
        if atom[0] in _COMPARISONS:
            compared.setdefault(atom[1], []).append((position, atom))
    for positions in by_subject.values():
        clashes += [(1 << a) | (1 << b) for a, b in itertools.combinations(positions, 2)]
    numeric = [atoms_of_subject for atoms_of_subject in compared.values() if any(atom[0] == "cmp" for _, atom in atoms_of_subject)]
    for truth in range(1 << len(atoms)):
        if any(truth & clash == clash for clash in clashes):
            continue
        if any(not _one_number_meets(atoms_of_subject, truth) for atoms_of_subject in numeric):
            continue
        if all(test(truth) is holds for test, holds in compiled):
            return True
    return False


ORDERS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}  # what a "cmp" atom's operator asks
_COMPARISONS = ("eq", "cmp")


def _one_number_meets(atoms: list[tuple[int, tuple]], truth: int) -> bool:
    """Some integer meets every comparison of one subject with the truth each has in `truth`; an
    equality with what is no integer (`mode == "fsdp"`) leaves the numbers unweighed."""
    tests, bounds = [], []
    for position, atom in atoms:
        holds = bool(truth >> position & 1)
        if atom[0] == "eq":
            try:
                number = int(atom[2])
            except ValueError:
                if holds:
                    return True
                continue
            tests.append(lambda value, number=number, holds=holds: (value == number) is holds)
        else:
            order, number = atom[2]
            tests.append(lambda value, compare=ORDERS[order], number=number, holds=holds: compare(value, number) is holds)
        bounds.append(number)
    return any(all(test(value) for test in tests) for bound in bounds for value in (bound - 1, bound, bound + 1))
