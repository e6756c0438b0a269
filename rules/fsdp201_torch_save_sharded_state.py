from __future__ import annotations

from typing import Iterable

from fsdplint import distributed
from fsdplint.rule import Finding, FixAvailability, Rule, Severity

_OPTIONS = "options=StateDictOptions(full_state_dict=True, cpu_offload=True)"


class TorchSaveShardedState(Rule):
    """
    ## What it does
    Finds `torch.save` of a state dict (of the model or of its optimizer) taken from a module
    sharded with `fully_shard`; and of the optimizer state of a module wrapped with FSDP1, to a file
    the ranks share or with `torch.distributed.checkpoint.save`.

    ## Why is this bad?
    The state dict of an FSDP2 module holds DTensors: each rank's file has the global shapes but
    only that rank's shard of the data. A fresh process cannot use it: `torch.load` fails with
    `UnpicklingError: Weights only load failed ... DTensor`, and with `weights_only=False`,
    `.full_tensor()` fails with `Could not resolve the process group`. Saving under
    `if rank == 0:` keeps only rank 0's shard.

    The same holds for the optimizer of a module wrapped with FSDP1 (`FullyShardedDataParallel`) with
    a strategy that shards (its default, FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD): the optimizer was
    built over the flattened parameters' local shards, and `optimizer.state_dict()` holds this
    rank's part of its state (on 2 ranks, half of each flat parameter's `exp_avg`, different on
    each). Saved to one file, on rank 0 or by every rank in turn, the other ranks' state is lost, and
    loading it on every rank gives each rank rank 0's part. Gather it with
    `FullyShardedDataParallel.optim_state_dict(model, optimizer)` on every rank. Nor does
    `torch.distributed.checkpoint.save` keep it: the ranks' parts are plain tensors with the same
    keys and shapes, which DCP takes as replicated, keeping one rank's (on 2 ranks, `dcp.load` gives
    rank 0 rank 1's state); save `get_optimizer_state_dict(model, optimizer)` instead.

    Bytes saved into an `io.BytesIO` stay in the process that saved them (a round-trip check): no
    file, not reported.

    A per-rank file, one whose name is formatted from the rank (`f"ckpt_rank{rank}.pt"`,
    `os.path.join(d, "shard_{}.pt".format(rank))`, `d + "/%d.pt" % rank`), is deliberate, but it
    cannot be loaded on another number of ranks: it is reported as a warning.

    ## Example
    ```python
    torch.save(model.state_dict(), "model.pt")
    ```

    ## Use instead
    ```python
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if torch.distributed.get_rank() == 0:
        torch.save(state, "model.pt")
    ```
    or `torch.distributed.checkpoint.save({"model": model.state_dict()}, checkpoint_id=path)` on
    every rank.

    ## Fix safety
    Unsafe: the fix gathers the full state dict on every rank (a collective, so every rank must
    reach it) and writes the file on rank 0 only. It is offered only where the save is not already
    under a condition, since a gather under `if rank == 0:` would hang.

    ## References
    - [Distributed state dict](https://pytorch.org/docs/stable/distributed.checkpoint.html)
    - [FSDP2 tutorial: checkpointing](https://pytorch.org/tutorials/intermediate/FSDP_tutorial.html)
    """

    code = "FSDP201"
    name = "torch-save-sharded-state"
    summary = "`torch.save` of a sharded (DTensor) state dict"
    severity = Severity.ERROR
    fix_availability = FixAvailability.UNSAFE

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.model import CALL
        from fsdplint.rulekit import at, calls, code, via, where

        for flow in program.flows:
            for event in flow.of_kind(CALL):
                if distributed.is_dcp_save(event.qname or ""):
                    yield from self._dcp_save(flow, event)
                    continue
                if event.qname != "torch.save" or not event.args:
                    continue
                sharded = flow.sharded_state(event.args[0], event.index)
                path = event.argument(1, "f")  # torch.save(obj, f, ...)
                buffer = flow.origin(path[1], event.index) if path is not None else None
                if buffer is not None and buffer.qname in distributed.IN_MEMORY_BUFFERS:
                    continue  # bytes kept in this process (pufanyi/vbvr-rl's save/load round trip), no file
                per_rank = path is not None and path[1].rank is not None  # a file name formatted from the rank
                what = code(event, event.node.args[0].value)
                if not sharded:
                    wrapped = None if per_rank else _fsdp1_optimizer_state(flow, event.args[0], event.index)
                    if wrapped is not None:
                        yield _fsdp1_optimizer_finding(flow, event, what, wrapped, "a file shared by the ranks keeps one rank's shard "
                                                       "and the other ranks' state is lost; gather it on every rank with "
                                                       "`FullyShardedDataParallel.optim_state_dict(model, optimizer)` and save on rank 0")
                    continue
                if per_rank:
                    yield Finding(event.file, event.node,
                                  f"`{what}` holds this rank's shards only (sharded at {where(sharded[0][1])}){via(event)}: the per-rank "
                                  f"files cannot be loaded on another number of ranks; prefer `torch.distributed.checkpoint.save`",
                                  severity=Severity.WARNING, related=(at(sharded[0][1], "sharded here"), *calls(flow, event)))
                    continue
                yield Finding(event.file, event.node,
                              f"`{what}` holds DTensor shards (sharded at {where(sharded[0][1])}){via(event)}: the file has one rank's "
                              f"shard and a fresh process cannot load it; gather with `get_model_state_dict(..., {_OPTIONS})` "
                              f"and save on rank 0, or use `torch.distributed.checkpoint.save`", self._fix(flow, event),
                              related=(at(sharded[0][1], "sharded here"), *calls(flow, event)))

    @staticmethod
    def _dcp_save(flow, event) -> Iterable[Finding]:
        """`dcp.save({"optimizer": optimizer.state_dict()})` of an FSDP1 optimizer: plain tensors with
        one key and shape on every rank, which DCP takes as replicated and keeps one rank's of (on 2
        CPU ranks, rank 0's `exp_avg` is not restored by `dcp.load`)."""
        from fsdplint.rulekit import code

        state = event.argument(0, "state_dict")
        wrapped = _fsdp1_optimizer_state(flow, state[1], event.index) if state is not None else None
        if wrapped is not None:
            yield _fsdp1_optimizer_finding(flow, event, code(event, state[0]), wrapped,
                                           f"its tensors have the same keys and shapes on every rank, and `{code(event, event.node.func)}` "
                                           f"takes them as replicated and keeps one rank's; save `get_optimizer_state_dict(model, optimizer)` instead")

    @staticmethod
    def _fix(flow, event):
        import libcst as cst

        from fsdplint.fixes import AddImport, Fix, Replace, fitted_call, parse_statements
        from fsdplint.rulekit import code, is_simple_statement, local_name, unused_name

        statement = event.statement
        if any(isinstance(parent, cst.If) for parent in event.parents) or not is_simple_statement(statement):
            return None
        if not (isinstance(statement.body[0], cst.Expr) and statement.body[0].value is event.node):
            return None
        imports = event.file.imports
        alias = next((name for name, target in imports.items() if target == "torch.distributed"), None)
        rank = f"{alias}.get_rank()" if alias else "torch.distributed.get_rank()" if imports.get("torch") == "torch" else None
        if rank is None:
            return None
        argument = event.node.args[0].value
        calls = [element.value for element in argument.elements] if isinstance(argument, cst.Dict) else [argument]
        gathers: list[tuple[str, str, list[str]]] = []  # (variable, function, arguments)
        helpers: set[str] = {"StateDictOptions"}
        for call in calls:
            if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "state_dict" and not call.args):
                return None
            receiver = code(event, call.func.value)
            named = [candidate for candidate in flow.optimizer_bindings if receiver == local_name(flow, candidate)]
            if named and len({ref for ref in flow.bindings if not ref.path and local_name(flow, ref) == receiver}) > 1:
                return None  # a variable bound more than once: which binding the save reads is not read here
            flow_ref = named[0] if named else None
            if flow_ref is None:
                gathers.append((unused_name(event, f"{receiver.replace('.', '_')}_state_dict"), "get_model_state_dict", [receiver, _OPTIONS]))
                helpers.add("get_model_state_dict")
                continue
            optimizer = next(e for e in flow.events if e.binding == flow_ref)
            owners = [local_name(flow, m) for m in optimizer.params_of]
            if len(owners) != 1 or owners[0] is None or len(event.chain) != 1:
                return None
            gathers.append((unused_name(event, f"{receiver.replace('.', '_')}_state_dict"), "get_optimizer_state_dict", [owners[0], receiver, _OPTIONS]))
            helpers.add("get_optimizer_state_dict")
        names = [variable for variable, _, _ in gathers]
        if len(set(names)) != len(names):
            return None

        def rewrite(line: cst.SimpleStatementLine):
            save = line.body[0].value
            first = save.args[0].value
            if isinstance(first, cst.Dict):
                elements = [element.with_changes(value=cst.Name(name)) for element, name in zip(first.elements, names)]
                first = first.with_changes(elements=elements)
            else:
                first = cst.Name(names[0])
            saved = line.with_changes(body=[line.body[0].with_changes(value=save.with_changes(args=[save.args[0].with_changes(value=first), *save.args[1:]]))], leading_lines=[])
            indent = event.file.position(statement).start.column
            gathered = parse_statements(event.file, "".join(f"{fitted_call(event.file, indent, f'{variable} = {function}', arguments)}\n"
                                                            for variable, function, arguments in gathers))
            guard = parse_statements(event.file, f"if {rank} == 0:\n    pass\n")[0]
            guard = guard.with_changes(body=guard.body.with_changes(body=[saved]))
            gathered[0] = gathered[0].with_changes(leading_lines=line.leading_lines)
            return cst.FlattenSentinel([*gathered, guard])

        return Fix("Gather the full state dict on every rank and save it on rank 0", safe=False,
                   operations=[Replace(statement, rewrite), AddImport("torch.distributed.checkpoint.state_dict", tuple(sorted(helpers)))])


def _fsdp1_optimizer_state(flow, state, before: int):
    """The FSDP1 wrap whose sharded parameters an optimizer whose state `state` holds was built over
    (after the wrap: before it, FSDP104), where the wrap certainly shards and may run in one execution
    with event `before`, the save (not relora's wrap under `if distributed_type == "fsdp":` against the
    save under `if distributed_type == "ddp":`); else None."""
    from fsdplint.model import OPTIMIZER, WRAP, Value
    from fsdplint.model.strategies import certainly_shards

    saved = flow.events[before]
    for optimizer in sorted(state.params_of & flow.optimizer_bindings, key=str):
        built = flow.origin(Value(ref=optimizer), before)
        if built is None or built.kind != OPTIMIZER:
            continue
        for module in built.params_of:
            wrap = flow.sharding_of(module, built.index, fsdp=1)
            if wrap is not None and wrap.kind == WRAP and certainly_shards(wrap) and not wrap.excludes(saved):
                return wrap
    return None


def _fsdp1_optimizer_finding(flow, event, what: str, wrapped, why: str) -> Finding:
    from fsdplint.rulekit import at, calls, via, where

    return Finding(event.file, event.node,
                   f"`{what}` holds this rank's shard of the optimizer state (FSDP1 flattens and shards the parameters, "
                   f"wrapped at {where(wrapped)}){via(event)}: {why}", related=(at(wrapped, "wrapped here"), *calls(flow, event)))
