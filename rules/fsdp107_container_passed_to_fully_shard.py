from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity

class ContainerPassedToFullyShard(Rule):
    """
    ## What it does
    Finds `fully_shard(model.layers)` where `model.layers` is an `nn.ModuleList` or
    `nn.ModuleDict`.

    ## Why is this bad?
    A container has no `forward`, so FSDP2 has nowhere to put its hooks: `fully_shard` raises
    `ValueError: fully_shard does not support containers that do not implement forward`. The
    intent is nearly always to shard each block.

    A list of modules, `fully_shard([model.norm, model.output])`, is a different and valid call:
    it groups those modules into one unit.

    ## Example
    ```python
    fully_shard(model.layers)
    ```

    ## Use instead
    ```python
    for layer in model.layers:
        fully_shard(layer)
    ```

    ## Fix safety
    Safe: the loop shards each block with the same arguments, which is what the call meant.
    The container type is taken from the class that assigns the attribute in the checked files.

    ## References
    - [fully_shard](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
    """

    code = "FSDP107"
    name = "container-passed-to-fully-shard"
    summary = "`fully_shard` on an `nn.ModuleList`/`nn.ModuleDict`, which has no forward"
    severity = Severity.ERROR
    fix_availability = FixAvailability.SAFE

    def check(self, program) -> Iterable[Finding]:
        import libcst as cst

        from fsdplint.fixes import Fix, Replace
        from fsdplint.rulekit import FORWARDLESS_CONTAINERS, calls, code, forwardless_container, is_simple_statement, unused_name, via

        for flow in program.flows:
            for event in flow.shard_events(fsdp=2):
                if not event.node.args or event.node.args[0].keyword is not None:
                    continue
                argument = event.node.args[0].value
                kind = forwardless_container(flow, event)
                if kind is None:
                    continue
                text = code(event, argument)
                fix = None
                statement = event.statement
                if is_simple_statement(statement) and isinstance(statement.body[0], cst.Expr) and statement.body[0].value is event.node:
                    variable = unused_name(event, "layer")

                    def loop(line: cst.SimpleStatementLine, variable=variable, iterable=f"{text}{FORWARDLESS_CONTAINERS[kind]}") -> cst.For:
                        call = line.body[0].value
                        args = [call.args[0].with_changes(value=cst.Name(variable)), *call.args[1:]]
                        inner = line.with_changes(body=[line.body[0].with_changes(value=call.with_changes(args=args))], leading_lines=[])
                        return cst.For(target=cst.Name(variable), iter=cst.parse_expression(iterable),
                                       body=cst.IndentedBlock([inner]), leading_lines=line.leading_lines)

                    fix = Fix(f"Shard each module of `{text}` in a loop", safe=True, operations=[Replace(statement, loop)])
                yield Finding(event.file, event.node,
                              f"`{text}` is an `nn.{kind}`, which has no forward{via(event)}: `fully_shard` raises "
                              f"`ValueError`; shard each module: `for layer in {text}{FORWARDLESS_CONTAINERS[kind]}: fully_shard(layer)`", fix,
                              related=calls(flow, event))
