from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity


class Fsdp1ClipOnNonRoot(Rule):
    """
    ## What it does
    Finds `clip_grad_norm_(...)` called on a `FullyShardedDataParallel` instance that is not the
    root: one wrapped inside another (`model.layer = FSDP(model.layer)`, then `model = FSDP(model)`,
    then `model.layer.clip_grad_norm_(1.0)`).

    ## Why is this bad?
    FSDP1's `clip_grad_norm_` reduces the norm over every gradient shard of the whole model and
    clips all of them, so it belongs to the root instance, which knows every unit. Once the root
    has run a forward, the nested instances know they are not the root, and the method refuses
    (torch 2.13, CPU/gloo, two ranks):
    `RuntimeError: `clip_grad_norm_()` should only be called on the root FSDP instance`.

    The clip is reported only after a forward of the root, where torch raises this error. Called
    before any forward, the nested instance takes itself for a root, and the root's first forward
    fails instead (`AssertionError: Non-root FSDP instance's `_is_root` should not have been set yet
    or should have been set to `False``).

    ## Example
    ```python
    model.layer = FSDP(model.layer)
    model = FSDP(model)
    ...
    model.layer.clip_grad_norm_(1.0)
    ```

    ## Use instead
    ```python
    model.clip_grad_norm_(1.0)
    ```

    ## Fix safety
    No fix: the root's `clip_grad_norm_` clips every parameter of the model, not only those of the
    nested unit, which changes the training when other units' gradients are larger than the
    threshold. To clip one unit alone, compute its norm across ranks by hand.

    ## References
    - [FullyShardedDataParallel.clip_grad_norm_](https://pytorch.org/docs/stable/fsdp.html#torch.distributed.fsdp.FullyShardedDataParallel.clip_grad_norm_)
    """

    code = "FSDP406"
    name = "fsdp1-clip-on-non-root"
    summary = "`clip_grad_norm_` on a nested (non-root) FSDP1 instance"
    severity = Severity.ERROR
    fix_availability = FixAvailability.NONE
    trigger_tokens = ("FullyShardedDataParallel",)

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.model import ASSIGN, CALL_VALUE, METHOD, WRAP
        from fsdplint.rulekit import at, calls, code, via, where

        for flow in program.flows:
            for event in flow.of_kind(METHOD):
                if event.method != "clip_grad_norm_" or event.target is None:
                    continue
                clipped = event.target
                # Wraps that run wherever the clip runs.
                wraps = [wrap for wrap in flow.of_kind(WRAP) if wrap.index < event.index and wrap.on_every_path_to(event)]
                # The instance clipped: a wrap of exactly this module.
                inner = next((wrap for wrap in reversed(wraps) if any(_same(clipped, target) for target in wrap.targets)), None)
                if inner is None:
                    continue
                # A later wrap of a module that holds it makes it a nested instance.
                outer = next((wrap for wrap in wraps if wrap.index > inner.index and not wrap.exclusive(inner)
                              and any(clipped.is_within(target) and len(target.path) < len(clipped.path) for target in wrap.targets)), None)
                if outer is None:
                    continue
                # The root has run a forward before the clip: torch knows the instance is not the root.
                forwards = [forward for forward in flow.of_kind(CALL_VALUE) if outer.index < forward.index < event.index
                            and forward.on_every_path_to(event) and any(_same(forward.target, target) for target in outer.targets)]
                # Nothing assigned another module to its attribute since (`model.layer = Layer()`).
                replaced = [assign for assign in flow.of_kind(ASSIGN) if outer.index < assign.index < event.index
                            and any(_same(clipped, target) for target in assign.targets)]
                if not forwards or replaced:
                    continue
                root = code(outer, outer.node.args[0].value) if outer.node.args else "the root"
                yield Finding(event.file, event.node,
                              f"`{code(event, event.node.func)}` is called on a `FullyShardedDataParallel` instance nested in "
                              f"another (`{root}`, wrapped at {where(outer)}){via(event)}: torch raises \"`clip_grad_norm_()` should "
                              f"only be called on the root FSDP instance\"; call `clip_grad_norm_` on the root",
                              related=(at(inner, "nested instance wrapped here"), at(outer, "root wrapped here"), *calls(flow, event)))


def _same(ref, target) -> bool:
    """`ref` is the module `target` names (not a sub-module of it)."""
    return ref is not None and ref.is_within(target) and len(ref.path) == len(target.path)
