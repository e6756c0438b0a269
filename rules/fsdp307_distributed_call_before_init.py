from __future__ import annotations

import sys
from typing import Iterable

from fsdplint import distributed
from fsdplint.rule import Finding, FixAvailability, Rule, Severity


class DistributedCallBeforeInit(Rule):
    """
    ## What it does
    Finds `dist.get_rank()`, `dist.get_world_size()`, `dist.new_group(...)` or a collective that a
    script runs before it starts the process group: the classic is `RANK = dist.get_rank()` at the
    top of a training script whose `main()` calls `init_process_group` later.

    ## Why is this bad?
    These calls need the default process group, and raise at once without it, on every rank:
    `ValueError: Default process group has not been initialized, please make sure to call
    init_process_group.` (torch 2.13, `torchrun --nproc_per_node 2`). The script dies before it
    trains.

    Only what a script shows to run first is reported: the top level of a file written to be run
    (it has `if __name__ == "__main__":` and no other checked file imports it), with the functions
    it calls followed, or a function started by `torch.multiprocessing.spawn`. The call must come
    before anything that could have started the group: `init_process_group`, `init_device_mesh`
    or `fully_shard` with no mesh (both start one themselves), any other `torch.distributed` call,
    a call fsdplint cannot follow (a library such as accelerate, lightning or deepspeed, or a
    function of another package), or a module of the run whose top level may start one at import.
    A call under `dist.is_initialized()` (or after the script asks it), or inside a `try` that
    handles the error, is not reported.

    ## Example
    ```python
    RANK = dist.get_rank()

    def main():
        dist.init_process_group("nccl")
        ...

    if __name__ == "__main__":
        main()
    ```

    ## Use instead
    ```python
    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        ...

    if __name__ == "__main__":
        main()
    ```

    ## Fix safety
    No fix: where the process group is started, and what else must move with the call, is the
    script's design.

    ## References
    - [Initialization](https://pytorch.org/docs/stable/distributed.html#initialization)
    - [init_process_group](https://pytorch.org/docs/stable/distributed.html#torch.distributed.init_process_group)
    """

    code = "FSDP307"
    name = "distributed-call-before-init"
    summary = "A torch.distributed call runs before the process group is initialized: it raises"
    severity = Severity.ERROR
    fix_availability = FixAvailability.NONE
    # Not `get_world_size`: utility files ask it everywhere (axolotl: 67 more files parsed), and a script
    # that calls it before starting its group names `init_process_group` or another of these too.
    trigger_tokens = ("get_rank", "new_group", "barrier", "all_reduce", "all_gather", "broadcast",
                      "reduce_scatter", "all_to_all", "dist.gather", "dist.scatter", "dist.send", "dist.recv",
                      "init_process_group")

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.rulekit import calls, code, spawns, via

        spawned = {id(function.node) for _, _, function in spawns(program)}
        for flow in program.flows:
            if flow.function is None and not flow.file.runs_as_script:
                continue
            if flow.function is not None and not (flow.is_entry and id(flow.function.node) in spawned):
                continue
            event = _first_call_before_init(flow)
            if event is None or flow.function is None and (_imported(flow.file, program) or _imports_a_starter(flow.file, program)):
                continue
            name = event.qname.rsplit(".", 1)[-1]
            yield Finding(event.file, event.node,
                          f"`{code(event, event.node)}` runs before the process group is initialized{via(event)}: "
                          f"`{name}` raises `Default process group has not been initialized`; call it after "
                          f"`init_process_group`", related=calls(flow, event))


def _first_call_before_init(flow):
    """The first call that raises without a process group, on the flow's way to its first start of one."""
    for event in flow.events:
        verdict = _verdict(flow, event)
        if verdict == "start":
            return None  # a group may exist from here on
        if verdict == "needs" and not _handled(event):
            return event  # it raises: nothing after it runs
    return None


def _verdict(flow, event) -> str | None:
    """"needs": the event raises without a process group; "start": it may start one (or the script
    asks whether one exists), or fsdplint cannot tell what it does; None: it does neither."""
    import libcst as cst

    from fsdplint.model import ASSIGN, CALL, ENTER, META, METHOD, OPTIMIZER, Ref, Value
    from fsdplint.model.names import BUILTINS

    kind, qname = event.kind, event.qname or ""
    if kind in (ENTER, META, OPTIMIZER, ASSIGN):
        return None  # an ENTER's body follows it in the flow
    if kind == CALL:
        if qname in distributed.PROCESS_GROUP_STARTERS or qname in distributed.PROCESS_GROUP_QUERIES:
            return "start"
        if qname.startswith("torch.distributed.") or qname == "torch.distributed":
            if distributed.needs_process_group(qname):
                return "needs"
            return None if distributed.split_qname(qname)[1] in distributed.PROCESS_GROUP_FREE else "start"
        if distributed.is_torch_name(qname):
            # DDP needs a group as much as `get_rank` does, but is no call the rule names.
            return "start" if qname.endswith("DistributedDataParallel") else None
        if qname in BUILTINS or qname.split(".")[0] in sys.stdlib_module_names:
            return None
        return "start"
    if kind == METHOD and event.target is not None:
        # A method of an object a builtin, the standard library or torch (outside torch.distributed) made:
        # `parser.add_argument(...)`, `logger.info(...)`.
        made = flow.origin(Value(ref=Ref(event.target.root)), event.index)
        made_by = made.qname if made is not None and made.kind == CALL and type(made.node) is cst.Call else None
        if made_by and not made_by.startswith("torch.distributed") and (
                made_by in BUILTINS or made_by.split(".")[0] in sys.stdlib_module_names or distributed.is_torch_name(made_by)):
            return None
    return "start"


def _handled(event) -> bool:
    """The call is inside a `try` that handles what it raises (`except ValueError: rank = 0`)."""
    import libcst as cst

    from fsdplint.model.syntax import holds_statement

    path = event.outer + event.parents + (event.statement,)
    return any(type(node) in (cst.Try, cst.TryStar) and node.handlers and holds_statement(node.body, inner)
               for node, inner in zip(path, path[1:]))


def _module_names(file) -> set[str]:
    return {file.module_name, file.module_name.rsplit(".", 1)[-1]}


def _imported(file, program) -> bool:
    """Another checked file imports the module: its top level may run there, after a group started."""
    names = _module_names(file)
    return any(other is not file and any(names & set(target.lstrip(".").split(".")) for target in other.imports.values())
               for other in program.files_with(file.module_name.rsplit(".", 1)[-1]))


def _imports_a_starter(file, program) -> bool:
    """The file imports a module of the run whose top level may start the group as it is imported."""
    targets = {part for target in file.imports.values() for part in target.lstrip(".").split(".")}
    for flow in program.flows:
        if flow.function is None and flow.file is not file and _module_names(flow.file) & targets:
            if any(_verdict(flow, event) == "start" for event in flow.events):
                return True
    return False
