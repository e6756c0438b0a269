from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity

INIT = "torch.distributed.init_process_group"
DESTROY = "torch.distributed.destroy_process_group"


class ProcessGroupNotDestroyed(Rule):
    """
    ## What it does
    Finds a script that initializes a process group and ends without `destroy_process_group()`.

    ## Why is this bad?
    The process group then lives until the interpreter tears it down, if it does: the exit can
    hang while pending NCCL work is aborted in a destructor, and the communicators' resources leak.
    When teardown does destruct the group, NCCL warns on every node, `WARNING:
    destroy_process_group() was not called before program exit, which can leak resources`; a
    sharded model's device mesh can keep the group alive past teardown, and then nothing is
    printed at all (seen with torch 2.11 on an H100), so a clean-looking log proves nothing.

    A group whose backend is known to be `"gloo"` (written in the call, or in a name assigned it once)
    is not reported: gloo exits silently. Nor is a group of one process (`world_size=1`, written in
    the call or in a name that only ever holds 1), which no other rank waits on. Nor is a process
    that serves forever after it (a `while True:` loop nothing leaves normally, reached on every
    path past the initialization, in the script's own code or in a function it calls): it is
    stopped, never torn down.

    The script is a file's top level (what runs when it is launched, `main()` under
    `if __name__ == "__main__":` included), a function handed to `torch.multiprocessing.spawn`, or
    one the top level hands a command line dispatcher (`fire.Fire(main)`, `typer.run(main)`).
    Each initialization the script may reach is checked on its own. A `destroy_process_group()`
    anywhere after it counts, unless in another arm of a branch (an `else` the initialization's `if`
    never reaches), through calls to
    functions of the checked files, in a `finally:` block, or registered with `atexit`; so does a
    library method that destroys it (accelerate's `Accelerator.end_training()`).

    ## Example
    ```python
    dist.init_process_group("nccl")
    train()
    ```

    ## Use instead
    ```python
    dist.init_process_group("nccl")
    try:
        train()
    finally:
        dist.destroy_process_group()
    ```

    ## Fix safety
    No fix: where the script ends, and whether a failure should still destroy the group, is the
    author's choice.

    ## References
    - [Shutdown](https://pytorch.org/docs/stable/distributed.html#shutdown)
    """

    code = "FSDP304"
    name = "process-group-not-destroyed"
    summary = "Process group initialized but never destroyed on the script's exit path"
    severity = Severity.WARNING
    fix_availability = FixAvailability.NONE
    trigger_tokens = ("init_process_group",)

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.model import CALL
        from fsdplint.rulekit import calls, process_group_backend, script_flows, starts_one_process, via

        for flow in script_flows(program):
            # Each initialization the script may reach (minifsdp's CPU, CUDA and MPS arms), with a
            # destroy that may run after it: in no arm apart from it.
            for init in (event for event in flow.of_kind(CALL) if event.qname == INIT):
                backend = process_group_backend(init)
                if backend is not None and "nccl" not in backend or starts_one_process(flow, init):
                    continue  # a gloo group left to the interpreter exits silently; one of one process waits on no other
                later = flow.events[init.index + 1:]
                if any(not event.exclusive(init) and _destroys(program, flow, event) for event in later) or flow.runs_forever_after(init):
                    continue
                yield Finding(init.file, init.node,
                              f"the process group initialized here is never destroyed{via(init)}: it lives until the "
                              f"interpreter's teardown, where NCCL's communicators are aborted, not shut down, and exit "
                              f"can hang; call `dist.destroy_process_group()` when the script ends", related=calls(flow, init))


def _destroys(program, flow, event) -> bool:
    from fsdplint import distributed
    from fsdplint.model import CALL, ENTER, METHOD

    if event.kind == METHOD and event.target is not None and not event.target.path:
        # `accelerator.end_training()`, `accelerator` built by `Accelerator(...)`
        if event.method in distributed.GROUP_DESTROYING_METHODS.get(flow.instances.get(event.target.root, ""), ()):
            return True

    if event.kind == CALL and event.qname == DESTROY:
        return True
    if event.kind in (CALL, ENTER) and any(event.file.qualify(arg.value) == DESTROY for arg in event.node.args):
        return True  # atexit.register(dist.destroy_process_group)
    # A function of the run that destroys the process group, by name: a script may reach it through a
    # call the model cannot resolve (`trainer.close()`).
    name = event.method if event.kind == METHOD else (event.qname or "").rsplit(".", 1)[-1] if event.kind == CALL else None
    # One the budget left unknown may destroy it.
    return name is not None and any(callee.exhausted or any(call.qname == DESTROY for call in callee.of_kind(CALL))
                                    for callee in program.flows_named(name, mentioning=DESTROY.rsplit(".", 1)[-1]))

