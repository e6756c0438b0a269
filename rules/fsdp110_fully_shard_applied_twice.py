from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity


class FullyShardAppliedTwice(Rule):
    """
    ## What it does
    Finds `fully_shard` called on a module that an earlier `fully_shard` call already sharded: the
    same module twice, a block that a loop over all the blocks already sharded
    (`for layer in model.layers: fully_shard(layer)` and then `fully_shard(model.layers[0])`), or a
    helper that shards called twice on one model.

    Only calls that run together are compared: two calls in different arms of an `if`, or one under
    a test the other is not under (`if not isinstance(m, FSDPModule): fully_shard(m)`), are not
    reported. A loop that shards only some of its modules (`if isinstance(m, Block): fully_shard(m)`)
    and a loop over `model.modules()` (modules at any depth) cover no module known to be the one
    sharded again.

    ## Why is this bad?
    `fully_shard` is a composable API, which refuses a module it was applied to before:
    `AssertionError: Each distinct composable distributed API can only be applied to a module once.
    fully_shard has already been applied to the following module: ...`. The script stops before
    training.

    ## Example
    ```python
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model.layers[0])
    fully_shard(model)
    ```

    ## Use instead
    ```python
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    ```

    ## Fix safety
    Unsafe: the fix removes the second call, which keeps the first call's arguments (its mesh, its
    `reshard_after_forward`); if the second call's arguments were the ones meant, change the first.
    It is offered only for a call written alone on its line, outside any loop, in the function
    reported, where removing it leaves its block not empty.

    ## References
    - [fully_shard](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
    """

    code = "FSDP110"
    name = "fully-shard-applied-twice"
    summary = "`fully_shard` called on a module an earlier `fully_shard` call already sharded"
    severity = Severity.ERROR
    fix_availability = FixAvailability.UNSAFE
    trigger_tokens = ("fully_shard",)

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.rulekit import at, caller_site, calls, code, via, where

        for flow in program.flows:
            shards = list(flow.shard_events(fsdp=2))
            for position, second in enumerate(shards):
                first = next((earlier for earlier in shards[:position] if self._same_module(flow, earlier, second)), None)
                if first is None:
                    continue
                helper_call = caller_site(flow, second, first)
                reported = helper_call or second
                if helper_call is None:
                    what = f"`{code(second, second.node)}` shards"
                else:
                    what = f"`{code(helper_call, helper_call.node.func)}(...)` shards again (at {where(second)})"
                fix = self._fix(second) if helper_call is None else None
                related = (at(first, "first sharded here"),) + ((at(second, "sharded again here"),) if helper_call else ()) \
                    + calls(flow, second, below=helper_call.node if helper_call else None)
                yield Finding(reported.file, reported.node,
                              f"{what} a module that `fully_shard` already sharded at {where(first)}{via(second)}: "
                              f"`fully_shard` raises `AssertionError` (\"can only be applied to a module once\"); shard each module once",
                              fix, related=related)

    @staticmethod
    def _same_module(flow, first, second) -> bool:
        """Both calls run together (the same arms: neither is under a test or in an arm the other is
        not) and shard one module, with nothing assigned over it in between."""
        from fsdplint.model import ASSIGN

        if set(first.arms) != set(second.arms):
            return False
        pairs = [(a, b) for a in _modules(first) for b in _modules(second) if _one_module(first, a, second, b)]
        if not pairs:
            return False
        replaced = [event.target for event in flow.events[first.index + 1:second.index] if event.kind == ASSIGN and event.target is not None]
        return any(not any(a.ref.is_within(target) for target in replaced) for a, _ in pairs)

    @staticmethod
    def _fix(second):
        import libcst as cst

        from fsdplint.fixes import Fix, Replace
        from fsdplint.model.syntax import statements_of, suites_of
        from fsdplint.rulekit import is_simple_statement

        statement = second.statement
        if len(second.chain) != 1 or not is_simple_statement(statement) or not isinstance(statement.body[0], cst.Expr) \
                or statement.body[0].value is not second.node or any(isinstance(node, (cst.For, cst.While)) for node in second.parents):
            return None
        holder = second.parents[-1] if second.parents else second.function.node if second.function else None
        if holder is None:
            block = statements_of(second.file.module)
        else:
            block = next((statements_of(suite) for suite in (suites_of(holder) if second.parents else (holder.body,))
                          if any(s is statement for s in statements_of(suite))), [])
        if len(block) < 2:
            return None
        return Fix("Remove the second `fully_shard` call", safe=False, operations=[Replace(statement, lambda _: cst.RemoveFromParent())])


def _modules(event):
    """The values of the modules a `fully_shard` call shards: its module, or each of a list's."""
    module = event.args[0] if event.args else event.kwargs.get("module")
    if module is None:
        return []
    return [element for element in module.elements if element.ref is not None] if module.elements is not None else \
        ([module] if module.ref is not None else [])


def _one_module(first, a, second, b) -> bool:
    """`a`, sharded by `first`, and `b`, sharded by `second`, are one module: the same variable and
    attributes with no `[]` step, or elements of one container where one call covers every element
    (a loop over the container whose body shards each without a test) or both name one literal index."""
    if a.ref == b.ref and "[]" not in a.ref.path:
        return True
    ea, eb = a.element, b.element
    if ea is None or eb is None or ea.container != eb.container or "[]" in ea.container.path:
        return False
    if ea.index is None and set(ea.arms) == set(first.arms):
        return True
    if eb.index is None and set(eb.arms) == set(second.arms):
        return True
    return ea.index is not None and ea.index == eb.index and ea.index != "?"
