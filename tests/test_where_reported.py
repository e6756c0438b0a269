"""Where a finding is reported: where the user must change the code. A helper whose own line is right
(it builds the optimizer, it shards the blocks) is reported at its caller's call when the caller's
order is the mistake; the helper's line goes with the finding as a related location."""

from __future__ import annotations

import textwrap

from fsdplint.api import check_source, fix_source

HELPERS = """
import torch
from torch.distributed.fsdp import fully_shard

def build_optimizer(model):
    return torch.optim.AdamW(model.parameters())

def apply_fsdp(model):
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
"""


def report(source: str, select: str = "FSDP104") -> list[tuple[int, str, list[tuple[int, str]]]]:
    """(line, message, [(line, message) of each related location]) of each finding."""
    return [(d.line, d.message, [(r.range.start.line, r.message) for r in d.related])
            for d in check_source(textwrap.dedent(source), "train.py", select=[select])]


def test_the_deepest_caller_of_both_is_reported_once():
    # main → setup, which calls build_optimizer before apply_fsdp: the call in setup is the mistake,
    # whichever flow (setup's, main's, the module's) finds it.
    [(line, message, related)] = report(HELPERS + """
def setup(model):
    optimizer = build_optimizer(model)
    apply_fsdp(model)
    return optimizer

def main(model):
    optimizer = setup(model)

main(Net())
""")
    assert line == 14 and message.startswith("`build_optimizer(...)` builds the optimizer before `fully_shard`")
    assert related == [(6, "optimizer built here"), (10, "sharded here")]


def test_a_mistake_inside_the_helper_stays_there():
    # The helper builds the optimizer and then shards: its own line is what must move.
    [(line, message, related)] = report("""
import torch
from torch.distributed.fsdp import fully_shard

def prepare(model):
    optimizer = torch.optim.AdamW(model.parameters())
    fully_shard(model)
    return optimizer

def main(model):
    optimizer = prepare(model)
""")
    assert line == 6 and message.startswith("the optimizer is built before")
    assert related == [(7, "sharded here"), (11, "`prepare` called here")]


def test_the_calls_that_led_into_a_helper_are_related_locations():
    [(line, _, related)] = report(HELPERS + """
def evaluate(model, batch):
    return model.forward(batch)

def main(model, batch):
    apply_fsdp(model)
    evaluate(model, batch)
""", select="FSDP103")
    assert line == 14
    assert related == [(11, "sharded here"), (18, "`evaluate` called here")]


def test_the_fix_moves_the_callers_statement():
    source = textwrap.dedent(HELPERS + """
def main(model, batches):
    optimizer = build_optimizer(model)
    apply_fsdp(model)
    for batch in batches:
        model(batch).sum().backward()
        optimizer.step()
""")
    fixed = fix_source(source, "train.py", select=["FSDP104"], unsafe_fixes=True)
    assert fixed == source.replace("    optimizer = build_optimizer(model)\n    apply_fsdp(model)\n",
                                   "    apply_fsdp(model)\n    optimizer = build_optimizer(model)\n")
    # Only a simple statement moves: one with another statement on its line stays, with no fix.
    crowded = source.replace("    optimizer = build_optimizer(model)\n", "    optimizer = build_optimizer(model); print(optimizer)\n")
    [diagnostic] = check_source(crowded, "train.py", select=["FSDP104"])
    assert (diagnostic.line, diagnostic.fix) == (14, None)


def test_a_decorated_helper_is_reported_at_the_callers_call():
    # The wrapper of a decorator of the run runs around the helper: the caller's call is still the call.
    [(line, _, related)] = report("""
import functools
import torch
from torch.distributed.fsdp import fully_shard

def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper

@logged
def make_optimizer(model):
    return torch.optim.AdamW(model.parameters())

def main(model):
    optimizer = make_optimizer(model)
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
""")
    assert line == 17
    assert (14, "optimizer built here") in related
