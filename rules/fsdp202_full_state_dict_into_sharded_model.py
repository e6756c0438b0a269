from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity

# Calls that return a state dict of plain, whole tensors read from a file.
_FULL_LOADERS = frozenset({"torch.load", "safetensors.torch.load_file", "safetensors.torch.load", "torch.hub.load_state_dict_from_url"})
_OPTIONS = "StateDictOptions(full_state_dict=True)"


class FullStateDictIntoShardedModel(Rule):
    """
    ## What it does
    Finds `model.load_state_dict(sd)` on a module sharded with `fully_shard`, where `sd` was read
    from a file (`torch.load`, `safetensors.torch.load_file`): a full state dict of plain tensors.
    A file whose name is formatted from the rank (`f"model_rank_{rank}.pt"`) is not one: it holds
    what that rank saved, its own shards, and loading them back works.

    ## Why is this bad?
    After `fully_shard` the parameters are DTensors, and `load_state_dict` copies each plain tensor
    into one: `RuntimeError: Error(s) in loading state_dict ...: aten.copy_.default got mixed
    torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor before calling
    distributed operators!`.

    ## Example
    ```python
    fully_shard(model)
    model.load_state_dict(torch.load("model.pt"))
    ```

    ## Use instead
    ```python
    set_model_state_dict(model, torch.load("model.pt"), options=StateDictOptions(full_state_dict=True))
    ```
    or load on rank 0 only and `options=StateDictOptions(full_state_dict=True,
    broadcast_from_rank0=True)`, or `torch.distributed.checkpoint.load` of a sharded checkpoint, or
    load the weights before `fully_shard`.

    ## Fix safety
    Unsafe: `set_model_state_dict` shards each full tensor and is a collective, so every rank must
    reach it (the fix is offered only where the load is under no rank guard), and it returns the
    missing and unexpected keys as `load_state_dict` does. The fix keeps `strict=False`.

    ## References
    - [Distributed state dict](https://pytorch.org/docs/stable/distributed.checkpoint.html)
    - [FSDP2 tutorial: loading a state dict](https://pytorch.org/tutorials/intermediate/FSDP_tutorial.html)
    """

    code = "FSDP202"
    name = "full-state-dict-into-sharded-model"
    summary = "A full state dict read from a file loaded into a module sharded with `fully_shard`"
    severity = Severity.ERROR
    fix_availability = FixAvailability.UNSAFE
    trigger_tokens = ("load_state_dict",)

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.model import CALL, METHOD
        from fsdplint.rulekit import at, calls, code, via, where

        for flow in program.flows:
            for event in flow.of_kind(METHOD):
                if event.method != "load_state_dict" or not event.args:
                    continue
                shard = flow.sharding_of(event.target, event.index, fsdp=2)
                loaded = flow.origin(event.args[0], event.index)
                if shard is None or loaded is None or loaded.kind != CALL or loaded.qname not in _FULL_LOADERS:
                    continue
                path = loaded.argument(0, "f")  # torch.load(f, ...)
                if path is not None and path[1].rank is not None:
                    continue  # a file per rank holds what that rank saved, its own shards (ChatLearn's resume)
                module = code(event, event.node.func.value)
                yield Finding(event.file, event.node,
                              f"`{module}` is sharded (at {where(shard)}){via(event)} and its parameters are DTensors: loading the "
                              f"full state dict from `{code(loaded, loaded.node)}` fails with `aten.copy_.default got mixed "
                              f"torch.Tensor and DTensor`; use `set_model_state_dict({module}, ..., options={_OPTIONS})` "
                              f"(with `broadcast_from_rank0=True` when only rank 0 reads the file)", self._fix(event, module),
                              related=(at(shard, "sharded here"), *calls(flow, event)))

    @staticmethod
    def _fix(event, module: str):
        import libcst as cst

        from fsdplint.fixes import AddImport, Fix, Replace
        from fsdplint.rulekit import code

        arguments = event.node.args
        extra = [arg for arg in arguments[1:]]
        strict = extra[0] if len(extra) == 1 and extra[0].keyword is not None and extra[0].keyword.value == "strict" else None
        if event.rank_guards or arguments[0].keyword is not None or (extra and strict is None):
            return None
        options = _OPTIONS if strict is None else f"StateDictOptions(full_state_dict=True, strict={code(event, strict.value)})"
        replacement = cst.parse_expression(f"set_model_state_dict({module}, {code(event, arguments[0].value)}, options={options})")
        return Fix("Load it with `set_model_state_dict(..., full_state_dict=True)`", safe=False, operations=[
            Replace(event.node, lambda _node: replacement),
            AddImport("torch.distributed.checkpoint.state_dict", ("StateDictOptions", "set_model_state_dict")),
        ])
