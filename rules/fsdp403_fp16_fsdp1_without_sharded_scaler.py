from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity

_GRAD_SCALERS = ("torch.GradScaler", "torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.amp.grad_scaler.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler")
_SHARDED_SCALER_MODULE = "torch.distributed.fsdp.sharded_grad_scaler"
_FP16 = frozenset({"torch.float16"})  # as the model names dtypes (distributed.TORCH_DTYPES)
# Arguments GradScaler and ShardedGradScaler share by name; by position they differ (ShardedGradScaler
# has backoff_factor before growth_factor).
_SHARED_KEYWORDS = ("device", "init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")


class Fp16Fsdp1WithoutShardedScaler(Rule):
    """
    ## What it does
    Finds fp16 training of an FSDP1 (`FullyShardedDataParallel`) model without
    `ShardedGradScaler`: a `torch.amp.GradScaler` (`torch.GradScaler`) / `torch.cuda.amp.GradScaler` stepping an
    optimizer over an FSDP1 model (also where an object's constructor keeps the scaler and the
    optimizer, `self.scaler = GradScaler()` in `__init__`, and a method steps them: the model is judged
    as that constructor left it), or an fp16 `MixedPrecision` in a program that wraps with
    `FullyShardedDataParallel`, trains (calls `backward()`) and scales no loss at all: a policy
    built where a model is wrapped, by that code; one built apart from any wrap (often a constant of
    a policies module that a function picks at run time), by the whole program. A constant of a
    module that no code of the checked files names past its own assignment reaches no wrap: it is
    not reported (a file of fp16, bf16 and fp32 policies of which the wrap takes bf16). Code that wraps and
    only evaluates has no gradients to underflow, and neither has a model that code wraps with its own
    fp16 policy and only loads and reads back while every loss it trains is known to come from
    another model (a checkpoint test's second model). A scaler built
    `enabled=False`, or with a test that is false whatever runs (`dtype == "float16"` where `dtype`
    is a `torch.dtype`), scales nothing and skips nothing: it is not reported, and does not count
    as loss scaling. A model wrapped with `sharding_strategy=ShardingStrategy.NO_SHARD` holds whole,
    all-reduced gradients on every rank, which all see the same overflow: not reported. A policy is
    fp16 by its `param_dtype`, the dtype the forward and backward compute in: one that only reduces
    in fp16 (`MixedPrecision(param_dtype=torch.float32, reduce_dtype=torch.float16)`) computes the
    gradients in fp32 and sends them in fp16, as DDP's fp16 compress hook does without a scaler, and
    is not reported.

    ## Why is this bad?
    Under FSDP1 each rank holds a shard of every gradient. `GradScaler` looks for inf/NaN in the
    gradients this rank holds only, so when an overflow lands in one rank's shard, that rank skips
    the step and halves its scale while the others step: the ranks' parameters and loss scales
    drift apart for good (observed on 2 ranks: loss scale 2097152 on rank 0, 16384 on rank 1
    after 10 steps). `ShardedGradScaler` all-reduces the overflow check. fp16 with no scaler at all
    lets small gradients underflow to zero.

    For FSDP2 (`fully_shard`) the gradients are DTensors and `torch.amp.GradScaler` is the right
    scaler: it is not reported there.

    ## Example
    ```python
    model = FSDP(model, mixed_precision=MixedPrecision(param_dtype=torch.float16))
    scaler = torch.amp.GradScaler("cuda")
    ```

    ## Use instead
    ```python
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    model = FSDP(model, mixed_precision=MixedPrecision(param_dtype=torch.float16))
    scaler = ShardedGradScaler("cuda")
    ```

    ## Fix safety
    Replacing the `GradScaler` with `ShardedGradScaler` is safe: it has the same methods and
    state dict and only adds the cross-rank overflow check. It is offered when the arguments are
    passed by name (or only the device by position), since the two constructors order
    `growth_factor` and `backoff_factor` differently. Where the model is wrapped on some paths only
    (`if args.fsdp:`), the fix is unsafe: a run on another path may start no process group, and
    `ShardedGradScaler.unscale_` then raises `Default process group has not been initialized`. fp16
    with no scaler has no fix: the training loop has to scale the loss.

    ## References
    - [ShardedGradScaler](https://github.com/pytorch/pytorch/blob/main/torch/distributed/fsdp/sharded_grad_scaler.py)
    - [FSDP1 mixed precision](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.MixedPrecision)
    """

    code = "FSDP403"
    name = "fp16-fsdp1-without-sharded-scaler"
    summary = "fp16 under FSDP1 without `ShardedGradScaler`"
    severity = Severity.ERROR
    fix_availability = FixAvailability.SOMETIMES_SAFE
    trigger_tokens = ("FullyShardedDataParallel", "GradScaler")

    def check(self, program) -> Iterable[Finding]:
        for flow in program.flows:
            yield from self._plain_scalers(flow)
        yield from self._fp16_without_scaler(program)

    def _plain_scalers(self, flow) -> Iterable[Finding]:
        """A plain scaler stepping an optimizer over an FSDP1 model. The scaler and the optimizer are
        those bound to what the step names in this flow, or the objects an object's constructor built
        into the attributes it names (`self.scaler = GradScaler()` and `self.optimizer = AdamW(
        self.model.parameters())` in `__init__`, stepped in a method): their model is judged as that
        constructor left it."""
        from fsdplint.model import CALL, METHOD
        from fsdplint.model.strategies import shards_nothing
        from fsdplint.rulekit import at, calls, safe_where_sharded, via, where

        reported: set[int] = set()
        for step in flow.of_kind(METHOD):
            if step.method not in ("step", "unscale_") or not step.args or step.target is None:
                continue
            for scaler_flow, scaler in _makers(flow, step.target, step):
                if scaler.kind != CALL or scaler.qname not in _GRAD_SCALERS or _disabled(scaler) or id(scaler) in reported:
                    continue
                wrap, wrap_flow = None, None
                for optimizer_flow, optimizer in _makers(flow, step.args[0].ref, step, last_only=True) if step.args[0].ref else ():
                    # Past a constructor, its object is as the constructor left it.
                    before = step.index if optimizer_flow is flow else len(optimizer_flow.events)
                    for module in sorted(optimizer.params_of, key=str):
                        found = optimizer_flow.sharding_of(module, before, fsdp=1)
                        # NO_SHARD: every rank holds the whole all-reduced gradients and skips the same steps.
                        if wrap is None and found is not None and not (scaler_flow is optimizer_flow and found.excludes(scaler)) \
                                and not shards_nothing(found, step if optimizer_flow is flow else None):
                            wrap, wrap_flow = found, optimizer_flow
                if wrap is None:
                    continue
                reported.add(id(scaler))
                yield Finding(scaler.file, scaler.node,
                              f"`{scaler.qname}` steps an optimizer over a model wrapped in `FullyShardedDataParallel` "
                              f"(at {where(wrap)}){via(scaler)}: it checks only this rank's gradient shards for overflow, so ranks "
                              f"skip different steps and drift apart; use `ShardedGradScaler` from `{_SHARDED_SCALER_MODULE}`",
                              safe_where_sharded(self._fix(scaler), wrap, step if wrap_flow is flow else None),
                              related=(at(wrap, "wrapped here"), *calls(scaler_flow, scaler)))

    @staticmethod
    def _fix(scaler):
        """`GradScaler(...)` -> `ShardedGradScaler(...)`: safe where the module is wrapped on every path to
        the step, so a process group is started (`rulekit.safe_where_sharded`); without one,
        `ShardedGradScaler.unscale_` raises (`Default process group has not been initialized`)."""
        import libcst as cst

        from fsdplint.fixes import AddImport, DropImportIfUnused, Fix, Replace

        args = scaler.node.args
        device_first = scaler.qname.startswith("torch.amp.") and args and args[0].keyword is None and not args[0].star
        rest = args[1:] if device_first else args
        if any(arg.keyword is None or arg.keyword.value not in _SHARED_KEYWORDS for arg in rest):
            return None
        return Fix("Use `ShardedGradScaler`, which checks every rank's gradients for overflow", safe=True,
                   operations=[Replace(scaler.node, lambda call: call.with_changes(func=cst.Name("ShardedGradScaler"))),
                               AddImport(_SHARDED_SCALER_MODULE, ("ShardedGradScaler",)), DropImportIfUnused(scaler.qname)])

    @staticmethod
    def _fp16_without_scaler(program) -> Iterable[Finding]:
        """An fp16 `MixedPrecision` where a model is wrapped with FSDP1 and trained (a `backward()`)
        and no loss is scaled anywhere in the program. A policy built where a model is wrapped is
        judged by that flow (dot-tokens-communication's evaluation script wraps, never trains, and is
        checked with a training script); one built apart from any wrap is often a module constant of
        a policies file (Modalities' `fpSixteen = MixedPrecision(...)`), picked by a function at run
        time and trained by another, and is judged by the program: it wraps and it trains."""
        from fsdplint.model import CALL, METHOD
        from fsdplint.rulekit import at, is_backward, where

        # The cheap question first: an fp16 policy.
        policies = {id(flow): fp16 for flow in program.flows if (fp16 := [event for event in flow.of_kind(CALL) if _fp16_policy(event)])}
        if not policies:
            return
        scales = any(_imports_sharded_scaler(file) for file in program.files_with("ShardedGradScaler")) \
            or any(_builds_scaler(flow) for flow in program.flows)
        trains = any(is_backward(event) for flow in program.flows for event in flow.of_kind(METHOD, CALL))
        wraps = [event for flow in program.flows for event in flow.shard_events(fsdp=1)]
        for flow in program.flows:
            if id(flow) not in policies:
                continue
            own = next(flow.shard_events(fsdp=1), None)
            if own is not None:  # judged by this code: does it train what it wraps, and scale its loss?
                # (dlrover's train_fsdp.py wraps in fp16 and trains with no scaler; another script of the repository has one)
                scales_here = _builds_scaler(flow) or any(event.method in ("scale", "unscale_") for event in flow.of_kind(METHOD)) \
                    or _imports_sharded_scaler(flow.file)
                backwards = [event for event in flow.of_kind(METHOD, CALL) if is_backward(event)]
                wrap = own if backwards and not scales_here else None
            else:  # a policy built apart from any wrap (Modalities' `fpSixteen`), by the program
                wrap = wraps[0] if wraps and trains and not scales else None
            for policy in policies[id(flow)] if wrap is not None else ():
                if own is not None and _only_untrained_take(flow, policy, backwards):
                    continue  # ByteCheckpoint's tests: the policy of a model only loaded into and read back
                if policy.function is None and policy.binding is not None and not policy.binding.path \
                        and not program.may_read_global(policy.file, policy.binding.root, policy.statement):
                    continue  # a global nothing reads (ConvNextV2's `fp16_policy` beside the `bf16_policy` it wraps with)
                yield Finding(policy.file, policy.node,
                              f"fp16 `MixedPrecision` in a program that wraps with `FullyShardedDataParallel` (at {where(wrap)}) "
                              f"and trains, and scales no loss: fp16 gradients underflow to zero without loss scaling; use "
                              f"`ShardedGradScaler` from `{_SHARDED_SCALER_MODULE}` (or train in bfloat16)", related=(at(wrap, "wrapped here"),))


def _makers(flow, ref, step, last_only: bool = False) -> list:
    """The calls that made the object `ref` names at `step`, each with its flow: those bound to it in
    this flow (with `last_only`, the last before the step), else the call by which its object's
    constructor built it (Flow.made_by_constructor)."""
    from fsdplint.model import Value

    bound = flow.bindings.get(ref, [])
    if last_only:
        made = flow.origin(Value(ref=ref), step.index) if not ref.path else \
            max((event for event in bound if 0 <= event.index < step.index), key=lambda event: event.index, default=None)
        bound = [made] if made is not None else []
    if bound:
        return [(flow, event) for event in bound]
    built = flow.made_by_constructor(ref, step.index)
    return [built] if built is not None else []


def _only_untrained_take(flow, policy, backwards) -> bool:
    """The models wrapped with `policy` in this flow are known to train nowhere in it: each backward's
    loss is known to come from a wrapped model of the flow, and none from one of these."""
    from fsdplint.rulekit import backward_sources

    wrapped = list(flow.shard_events(fsdp=1))
    taking = [wrap for wrap in wrapped if (given := wrap.kwargs.get("mixed_precision")) is not None
              and flow.origin(given, wrap.index) is policy]
    if not taking:
        return False
    roots, mine = _wrapped_roots(wrapped), _wrapped_roots(taking)
    for backward in backwards:
        sources = backward_sources(flow, backward)
        if sources is None or not sources & roots or sources & mine:
            return False
    return True


def _wrapped_roots(wraps) -> set[str]:
    """The variables of the modules the wraps wrap and of what they return."""
    return {ref.root for wrap in wraps for ref in (*wrap.targets, wrap.binding) if ref is not None}


def _fp16_policy(event) -> bool:
    """`MixedPrecision(param_dtype=torch.float16)`, a dtype the model knows: the forward and backward
    compute in fp16. A policy that only reduces in fp16 (`reduce_dtype=torch.float16` over fp32
    parameters) computes in fp32 and compresses the gradients' traffic, as DDP's fp16 compress hook
    does without a scaler (Leo-AO-99/CSYE7105_FINAL's DDPM)."""
    if event.qname != "torch.distributed.fsdp.MixedPrecision" or "param_dtype" not in event.kwargs:
        return False
    dtypes = event.kwargs["param_dtype"].dtypes
    return bool(dtypes) and dtypes <= _FP16


def _imports_sharded_scaler(file) -> bool:
    return any(name.endswith("ShardedGradScaler") for name in file.imports.values())


def _builds_scaler(flow) -> bool:
    """The code builds a loss scaler that scales (not `GradScaler(enabled=False)`)."""
    from fsdplint.model import CALL

    return any(event.qname in _GRAD_SCALERS and not _disabled(event) for event in flow.of_kind(CALL))


def _disabled(scaler) -> bool:
    """`GradScaler(enabled=False)`, or `enabled=` a test that is false whatever runs (`dtype == "float16"`
    with `dtype` a torch dtype): a scaler that scales nothing and never skips a step."""
    enabled = scaler.kwargs.get("enabled")
    return enabled is not None and (enabled.constant == "False" or enabled.always_false)
