from __future__ import annotations

from typing import Iterable

from fsdplint.distributed import FSDP1_KEYWORDS_INSTEAD, FSDP1_STRATEGIES
from fsdplint.rule import Finding, FixAvailability, Rule, Severity

_FSDP = "torch.distributed.fsdp"
# MixedPrecision arguments MixedPrecisionPolicy takes under the same name (and the first two by position).
_POLICY_KEYWORDS = ("param_dtype", "reduce_dtype", "cast_forward_inputs")


class Fsdp1ArgumentsToFullyShard(Rule):
    """
    ## What it does
    Finds FSDP1 (`FullyShardedDataParallel`) arguments and classes handed to FSDP2's
    `fully_shard`: `sharding_strategy=`, `auto_wrap_policy=`, `mixed_precision=`, `cpu_offload=`
    and the other FSDP1 keywords, `mp_policy=MixedPrecision(...)` and
    `offload_policy=CPUOffload(...)`.

    ## Why is this bad?
    `fully_shard` takes none of FSDP1's keywords: `fully_shard(m, sharding_strategy=...)` raises
    `TypeError: fully_shard() got an unexpected keyword argument 'sharding_strategy'`. FSDP1's
    classes are worse: `mp_policy=MixedPrecision(param_dtype=torch.bfloat16)` is accepted and the
    forward fails with `RuntimeError: mat1 and mat2 must have the same dtype`, and
    `offload_policy=CPUOffload(offload_params=True)` is silently ignored: the parameters stay on
    the device.

    ## Example
    ```python
    fully_shard(block, sharding_strategy=ShardingStrategy.SHARD_GRAD_OP,
                mp_policy=MixedPrecision(param_dtype=torch.bfloat16),
                offload_policy=CPUOffload(offload_params=True))
    ```

    ## Use instead
    ```python
    fully_shard(block, reshard_after_forward=False,
                mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16),
                offload_policy=CPUOffloadPolicy())
    ```

    ## Fix safety
    The mapped arguments are safe fixes: `sharding_strategy` `FULL_SHARD` becomes
    `reshard_after_forward=True` and `SHARD_GRAD_OP` `False`; `MixedPrecision(...)` becomes
    `MixedPrecisionPolicy(...)` with the same `param_dtype`, `reduce_dtype` and
    `cast_forward_inputs`; `CPUOffload(offload_params=True)` becomes `CPUOffloadPolicy()` and a
    `CPUOffload` that offloads nothing is dropped; imports are added. A `MixedPrecision` with
    `buffer_dtype` gets an unsafe fix: FSDP2 does not cast buffers, so the fix drops
    `buffer_dtype` and the buffers keep their dtype (cast them yourself if the model relies on
    it). Other strategies (`HYBRID_SHARD` needs a 2-D mesh) and the keywords with no counterpart
    (`auto_wrap_policy`: shard the blocks first) are reported with what to do and no fix.

    ## References
    - [FSDP2 tutorial: FSDP1 to FSDP2](https://pytorch.org/tutorials/intermediate/FSDP_tutorial.html)
    - [fully_shard](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
    """

    code = "FSDP502"
    name = "fsdp1-arguments-to-fully-shard"
    summary = "FSDP1 arguments or classes (`sharding_strategy`, `MixedPrecision`, `CPUOffload`) handed to `fully_shard`"
    severity = Severity.ERROR
    fix_availability = FixAvailability.SOMETIMES_SAFE
    trigger_tokens = ("fully_shard",)

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.rulekit import calls, via

        for flow in program.flows:
            for event in flow.shard_events(fsdp=2):
                given = {arg.keyword.value for arg in event.node.args if arg.keyword is not None}
                for arg in event.node.args:
                    if arg.keyword is None:
                        continue
                    keyword = arg.keyword.value
                    origin = flow.origin(event.kwargs[keyword], event.index)
                    built = origin.qname if origin is not None else None
                    if keyword == "sharding_strategy":
                        found = self._sharding_strategy(event, arg, given)
                    elif keyword in ("mixed_precision", "mp_policy"):
                        found = self._mixed_precision(event, arg, origin, built)
                    elif keyword in ("cpu_offload", "offload_policy"):
                        found = self._offload(event, arg, built)
                    elif keyword in FSDP1_KEYWORDS_INSTEAD:
                        found = (f"`{keyword}` is an FSDP1 argument: `fully_shard` raises `TypeError`; {FSDP1_KEYWORDS_INSTEAD[keyword]}", None)
                    else:
                        found = None
                    if found is not None:
                        message, fix = found
                        yield Finding(event.file, arg, message + via(event), fix, related=calls(flow, event))

    @staticmethod
    def _sharding_strategy(event, arg, given):
        from fsdplint.fixes import DropImportIfUnused, Fix, Replace

        qualified = event.file.qualify(arg.value) or ""
        strategy = ".".join(qualified.split(".")[-2:]) if qualified.startswith(_FSDP) else ""
        member = strategy.removeprefix("ShardingStrategy.") if strategy.startswith("ShardingStrategy.") else None
        reshard, hybrid = FSDP1_STRATEGIES.get(member, (None, True))
        value = None if hybrid else str(reshard)  # a hybrid strategy needs a 2-D mesh, not a keyword
        message = "`sharding_strategy` is an FSDP1 argument: `fully_shard` raises `TypeError`; "
        if value is None or "reshard_after_forward" in given:
            return message + "use `reshard_after_forward` (True: FULL_SHARD, False: SHARD_GRAD_OP; HYBRID_SHARD: a 2-D `mesh`)", None
        fix = Fix(f"Pass `reshard_after_forward={value}`", safe=True,
                  operations=[Replace(arg, lambda node: _keyword(node, "reshard_after_forward", value)),
                              DropImportIfUnused(qualified.rsplit(".", 1)[0])])
        return message + f"`{strategy}` is `reshard_after_forward={value}`", fix

    @staticmethod
    def _mixed_precision(event, arg, origin, built):
        from fsdplint.fixes import AddImport, DropImportIfUnused, Fix, Replace

        keyword = arg.keyword.value
        if built == f"{_FSDP}.MixedPrecisionPolicy" and keyword == "mp_policy":
            return None
        if built not in (f"{_FSDP}.MixedPrecision", f"{_FSDP}.MixedPrecisionPolicy"):
            if keyword == "mixed_precision":
                return "`mixed_precision` is an FSDP1 argument: `fully_shard` raises `TypeError`; pass a `MixedPrecisionPolicy` as `mp_policy`", None
            return None
        operations = [] if keyword == "mp_policy" else [Replace(arg, lambda node: node.with_changes(keyword=_name("mp_policy")))]
        if built == f"{_FSDP}.MixedPrecisionPolicy":
            return ("`mixed_precision` is an FSDP1 argument: `fully_shard` raises `TypeError`; pass the policy as `mp_policy`",
                    Fix("Pass it as `mp_policy`", safe=True, operations=operations))
        problem = ("`mp_policy` is FSDP1's `MixedPrecision`: `fully_shard` accepts it and the forward fails with "
                   "`RuntimeError: mat1 and mat2 must have the same dtype`" if keyword == "mp_policy" else
                   "`mixed_precision=MixedPrecision(...)` is FSDP1's: `fully_shard` raises `TypeError`")
        call = origin.node
        kept, dropped, unknown = _policy_arguments(call)
        if unknown or origin.file is not event.file:
            return problem + "; use `mp_policy=MixedPrecisionPolicy(...)`", None
        safe = not dropped
        advice = "; use `mp_policy=MixedPrecisionPolicy(...)`" + ("" if safe else " (FSDP2 does not cast buffers: `buffer_dtype` has no counterpart)")
        operations.append(Replace(call, lambda node: _as_policy(node)))
        operations += [AddImport(_FSDP, ("MixedPrecisionPolicy",)), DropImportIfUnused(built)]
        return problem + advice, Fix("Use `MixedPrecisionPolicy`" + ("" if safe else ", dropping `buffer_dtype`"), safe=safe, operations=operations)

    @staticmethod
    def _offload(event, arg, built):
        import libcst as cst

        from fsdplint.fixes import AddImport, DropImportIfUnused, Fix, Replace

        if built != f"{_FSDP}.CPUOffload":
            if arg.keyword.value == "cpu_offload":
                return "`cpu_offload` is an FSDP1 argument: `fully_shard` raises `TypeError`; pass `offload_policy=CPUOffloadPolicy()`", None
            return None
        problem = ("`offload_policy` is FSDP1's `CPUOffload`, which `fully_shard` silently ignores" if arg.keyword.value == "offload_policy"
                   else "`cpu_offload` is an FSDP1 argument: `fully_shard` raises `TypeError`")
        call = arg.value
        if not isinstance(call, cst.Call) or event.file.qualify(call.func) != f"{_FSDP}.CPUOffload":
            return problem + "; pass `offload_policy=CPUOffloadPolicy()`", None
        offloads = _offloads_params(call)
        if offloads is None:
            return problem + "; pass `offload_policy=CPUOffloadPolicy()` to offload the parameters", None
        unused = DropImportIfUnused(built)
        if offloads:
            return problem + "; pass `offload_policy=CPUOffloadPolicy()`", Fix(
                "Pass `offload_policy=CPUOffloadPolicy()`", safe=True,
                operations=[Replace(arg, lambda node: _keyword(node, "offload_policy", "CPUOffloadPolicy()")), AddImport(_FSDP, ("CPUOffloadPolicy",)), unused])
        keyword = arg.keyword.value
        return problem + "; it offloads nothing: drop it", Fix("Drop the argument: it offloads nothing", safe=True,
                                                                 operations=[Replace(event.node, lambda node: _without(node, keyword)), unused])


def _name(value: str):
    import libcst as cst

    return cst.Name(value)


def _keyword(arg, keyword: str, value: str):
    import libcst as cst

    return arg.with_changes(keyword=cst.Name(keyword), value=cst.parse_expression(value))


def _without(call, keyword: str):
    """The call without its `keyword=` argument. The argument before it keeps its own comment and
    takes the removed one's comma ending: its line break and the indentation of what follows."""
    import libcst as cst

    args = list(call.args)
    index = next(i for i, arg in enumerate(args) if arg.keyword is not None and arg.keyword.value == keyword)
    removed = args.pop(index)
    if index > 0:
        previous, comma = args[index - 1].comma, removed.comma
        if isinstance(previous, cst.Comma) and isinstance(comma, cst.Comma) and isinstance(previous.whitespace_after, cst.ParenthesizedWhitespace) \
                and isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace):
            comma = previous.with_changes(whitespace_after=previous.whitespace_after.with_changes(
                indent=comma.whitespace_after.indent, last_line=comma.whitespace_after.last_line))
        args[index - 1] = args[index - 1].with_changes(comma=comma)
    return call.with_changes(args=args)


def _offloads_params(call) -> bool | None:
    """`CPUOffload(offload_params=True)` -> True, `CPUOffload()` / `(False)` -> False, unknown -> None."""
    import libcst as cst

    values = [arg.value for arg in call.args if arg.keyword is None or arg.keyword.value == "offload_params"]
    if not values:
        return False if not call.args else None
    if len(call.args) == 1 and isinstance(values[0], cst.Name) and values[0].value in ("True", "False"):
        return values[0].value == "True"
    return None


def _policy_arguments(call) -> tuple[list, list, list]:
    """The arguments of `MixedPrecision(...)` that `MixedPrecisionPolicy` keeps, that the fix drops
    (`buffer_dtype`), and that it cannot map."""
    kept, dropped, unknown = [], [], []
    for position, arg in enumerate(call.args):
        name = arg.keyword.value if arg.keyword is not None else None
        if arg.star:
            unknown.append(arg)
        elif name in _POLICY_KEYWORDS or name is None and position < 2:
            kept.append(arg)
        elif name == "buffer_dtype" or name is None and position == 2:
            dropped.append(arg)
        else:
            unknown.append(arg)
    return kept, dropped, unknown


def _as_policy(call):
    """`MixedPrecision(...)` -> `MixedPrecisionPolicy(...)` with the arguments it keeps, in their formatting."""
    import libcst as cst

    kept, _, _ = _policy_arguments(call)
    if kept and call.args and kept[-1] is not call.args[-1]:
        kept[-1] = kept[-1].with_changes(comma=call.args[-1].comma)
    return call.with_changes(func=cst.Name("MixedPrecisionPolicy"), args=kept)
