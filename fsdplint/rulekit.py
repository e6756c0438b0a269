"""Small helpers rules share for messages and fix placement. They read the model; they derive nothing."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import libcst as cst

    from fsdplint.model import Event, FileModel, Flow, Ref


def where(event: Event) -> str:
    """`train.py:12`, the place of an event, for messages that point at a second place."""
    return f"{event.file.display}:{event.file.position(event.node).start.line}"


def via(event: Event) -> str:
    """` (via main → setup → shard_model)` when the event was reached through calls."""
    return f" (via {' → '.join(event.chain)})" if len(event.chain) > 1 else ""


def code(event: Event, node: cst.CSTNode) -> str:
    return event.file.code(node).strip()


def anchor_in_block(first: Event, later: Event) -> cst.CSTNode | None:
    """The statement of `first`'s block that holds `later` (itself, or a loop around it).

    None when they are in different files or functions, or `later` is not inside that block.
    """
    if first.file is not later.file or first.chain != later.chain:
        return None
    depth = len(first.parents)
    if later.parents[:depth] != first.parents:
        return None
    path = later.parents + (later.statement,)
    return _within_function(first, path[depth])


def is_simple_statement(node: cst.CSTNode) -> bool:
    import libcst as cst

    return isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1


def local_name(flow: Flow, ref: Ref) -> str | None:
    """The name a ref has in the flow's own function, if it is a plain variable there."""
    if ref.path or "@" in ref.root:
        return None
    return ref.root


def unused_name(event: Event, preferred: str) -> str:
    """`preferred`, or `preferred_2`… if the function holding `event` already uses that name."""
    import libcst as cst

    if event.function:
        scope = event.file.code(event.function.node)
    else:  # module level: its own statements, not the bodies of its functions and classes
        module = event.file.module
        scope = "".join(module.code_for_node(s) for s in module.body if not isinstance(s, (cst.FunctionDef, cst.ClassDef)))
    candidate, number = preferred, 1
    while re.search(rf"\b{re.escape(candidate)}\b", scope):
        number += 1
        candidate = f"{preferred}_{number}"
    return candidate


def statement_after_loops(events: list[Event]) -> cst.CSTNode | None:
    """Where code that must follow all `events` goes: after the loops that hold them.

    The events must come from one function (not through calls). The anchor is the statement at the
    deepest block the events share, outside the outermost loop around them.
    """
    import libcst as cst

    if not events or len(events[0].chain) != 1 or any(e.chain != events[0].chain or e.file is not events[0].file for e in events):
        return None
    common = list(events[0].parents)
    for event in events[1:]:
        depth = 0
        while depth < min(len(common), len(event.parents)) and common[depth] is event.parents[depth]:
            depth += 1
        common = common[:depth]
    loops = [index for index, node in enumerate(common) if isinstance(node, (cst.For, cst.While))]
    if loops:
        common = common[:loops[0]]
    last = events[-1]
    return _within_function(last, (last.parents + (last.statement,))[len(common)])


def _within_function(event: Event, statement: cst.CSTNode) -> cst.CSTNode | None:
    """`statement`, unless it is the def of a one-line function (`def f(): a(); b()`) holding `event`:
    code placed around the def would run outside the function."""
    return None if event.function is not None and statement is event.function.node else statement
