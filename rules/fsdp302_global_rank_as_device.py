from __future__ import annotations

from functools import cached_property
from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity

# Each launcher's global rank variable and the local rank variable the same launcher sets.
_LOCAL_VARIABLES = {"RANK": "LOCAL_RANK", "SLURM_PROCID": "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK": "OMPI_COMM_WORLD_LOCAL_RANK",
                    "PMI_RANK": "MPI_LOCALRANKID"}


class GlobalRankAsDevice(Rule):
    """
    ## What it does
    Finds the global rank (`RANK`, `dist.get_rank()`) used as a GPU index:
    `torch.cuda.set_device(rank)`, `model.cuda(rank)`, `model.to(rank)`, `torch.device("cuda", rank)`,
    `f"cuda:{rank}"`, `torch.set_default_device(f"cuda:{rank}")`, `device_id=rank`, `device_ids=[rank]`.

    ## Why is this bad?
    A GPU index counts the GPUs of one machine, the global rank counts the processes of the whole
    job. On one node they agree; on the second node rank 8 asks for GPU 8 of an 8-GPU machine and
    the process dies with `RuntimeError: CUDA error: invalid device ordinal`. The index of a
    process on its own node is its local rank, which torchrun sets in `LOCAL_RANK`.

    A rank received as a parameter, such as the first argument `torch.multiprocessing.spawn` passes
    to its function on one machine, is not reported. Nor is the global rank where the program shows
    it runs on one node, on every path that reaches the use:

    - in a function `torch.multiprocessing.spawn` (or `start_processes`) starts, and what it calls,
      when the number of processes is `torch.cuda.device_count()` (or `torch.accelerator`'s, or
      `torch.xpu`'s), a variable assigned from it, a literal or left out: one process starts them all
      on its own machine;
    - where `init_process_group` meets at a place of this machine: `init_method="file://..."` (or
      `store=FileStore(...)`), `"tcp://localhost:..."` or `"tcp://127.0.0.1:..."`, written there or
      known from the program (`f"tcp://{host}:{port}"` with `host` passed `"localhost"`), or the
      default `env://` after `os.environ["MASTER_ADDR"] = "localhost"` on every path to it. A file
      store on a file system that several machines share is the exception this misses;
    - where `init_process_group` is given `world_size=torch.cuda.device_count()` (or a variable
      assigned from it): as many processes as this machine has GPUs;
    - in a spawned function that passes its process index as `rank=` and a literal `world_size=`:
      the ranks are the spawned processes' indices;
    - the rank asked of the group (`dist.get_rank()`) in a function a new process runs (`mp.spawn`'s,
      or `multiprocessing.Process(target=fn)`'s, a start method context's `ctx.Process` included)
      where every group it may have started before meets at a place of this machine, as above;
    - in a test module (`test_*.py`, `*_test.py`, `conftest.py`): pytest runs a test, and the
      processes it spawns, on one machine.

    Nor is `device=rank` given to a call that is not torch's (`PromptExpander(device=rank)`, a class
    of the checked code or of another library): fsdplint does not follow it, so where the value goes
    is not known.

    A count from the command line (`nprocs=args.nprocs`), `init_method="env://"` with a `MASTER_ADDR`
    the launcher sets (or `os.environ.setdefault`), or an address computed at run time
    (`f"tcp://{master_addr}:{port}"`) says nothing of the node count: the use is reported.

    ## Example
    ```python
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    ```

    ## Use instead
    ```python
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    ```

    ## Fix safety
    The fix puts the local rank where the global rank was used as a device index (and imports `os`
    if needed): on one node it is the same number, on more it is the right one. It is safe for a rank
    read from the environment, since the launcher that set it sets the local one too
    (`RANK` → `int(os.environ["LOCAL_RANK"])`, `SLURM_PROCID` → `SLURM_LOCALID`,
    `OMPI_COMM_WORLD_RANK` → `OMPI_COMM_WORLD_LOCAL_RANK`). For `dist.get_rank()` it is unsafe:
    `LOCAL_RANK` is set by torchrun and the usual launchers, but a script started another way may lack
    it. A device string or device built from the rank elsewhere and only used here is reported
    without a fix, and so is a rank a function receives from its caller.

    ## References
    - [torchrun environment variables](https://pytorch.org/docs/stable/elastic/run.html#environment-variables)
    - [torch.cuda.set_device](https://pytorch.org/docs/stable/generated/torch.cuda.set_device.html)
    """

    code = "FSDP302"
    name = "global-rank-as-device"
    summary = "Global rank used as a GPU index: invalid device ordinal on the second node"
    severity = Severity.ERROR
    fix_availability = FixAvailability.SOMETIMES_SAFE
    trigger_tokens = ('"RANK"', "'RANK'", "get_rank", "SLURM_PROCID", "PMI_RANK", "OMPI_COMM_WORLD_RANK")

    def check(self, program) -> Iterable[Finding]:
        from fsdplint import distributed
        from fsdplint.model import CALL, CALL_VALUE, GLOBAL_RANK, METHOD, WRAP
        from fsdplint.rulekit import calls, code, device_arguments, via

        one_node = _OneNode(program)
        for flow in program.flows:
            reported_names: set[str] = set()
            for event in flow.of_kind(CALL, METHOD, CALL_VALUE, WRAP):
                ranks = [(node, value) for node, value in device_arguments(event) if value.rank is not None and value.rank.scope == GLOBAL_RANK]
                if not ranks or flow.file.is_test:
                    continue
                # `device=` of a call that is not torch's (a class of the checked code, whose constructor
                # the model does not follow, or another library's): where the value goes is not known.
                known_callee = event.kind in (METHOD, WRAP) or distributed.is_torch_name(event.qname or "")
                keywords = () if known_callee else {id(arg.value) for arg in event.node.args if arg.keyword is not None}
                for node, value in ranks:
                    if id(node) in keywords or one_node.shown(flow, event, from_group=value.rank.variable is None):
                        continue
                    if value.rank.formatted and value.ref is not None:
                        # A device string held in a variable: one finding, at its first use.
                        if value.ref.root in reported_names:
                            continue
                        reported_names.add(value.ref.root)
                    what = "a device named by the global rank" if value.rank.formatted else "the global rank used as a device index"
                    yield Finding(event.file, node,
                                  f"`{code(event, node)}` is {what}{via(event)}: on a second node it names a GPU that does "
                                  f"not exist (`invalid device ordinal`); use the local rank, `{_local_rank(value.rank)}`",
                                  self._fix(event, node, value), related=calls(flow, event))

    @staticmethod
    def _fix(event, node, value):
        """The local rank in place of the rank, or of the one rank an f-string formats."""
        import libcst as cst

        from fsdplint.fixes import AddImport, Fix, Replace

        local = _local_rank(value.rank)
        if isinstance(node, cst.FormattedString):
            parts = [part for part in node.parts if isinstance(part, cst.FormattedStringExpression)]
            if len(parts) != 1:
                return None
            target, replacement = parts[0].expression, local.replace('"', "'" if '"' in node.start else '"')
        elif value.rank.formatted:
            return None  # a device string made elsewhere: the fix belongs where it is made
        elif isinstance(node, cst.Name) and event.function and node.value in event.function.params:
            return None  # the caller passed the rank: the fix belongs at its call
        else:
            target, replacement = node, local
        return Fix(f"Use the local rank, `{local}`, as the device index", safe=value.rank.variable is not None,
                   operations=[Replace(target, lambda _: cst.parse_expression(replacement)), AddImport("os")])


def _local_rank(rank) -> str:
    """The expression reading the local rank from the variable the launcher of `rank` sets."""
    return f'int(os.environ["{_LOCAL_VARIABLES.get(rank.variable, "LOCAL_RANK")}"])'


class _OneNode:
    """Where the program shows that it runs on one machine, so that its global rank is its local rank.

    Judged per path: an event of a flow no other flow calls (a script's top level, a function
    `mp.spawn` starts) by that flow; an event of a called function by every such flow that reaches it.
    """

    def __init__(self, program) -> None:
        self.program = program

    @cached_property
    def spawned(self) -> dict[int, bool]:
        """Each function mp.spawn starts (by the id of its node): whether every spawn of it starts the whole job."""
        from fsdplint.rulekit import spawns

        spawned: dict[int, bool] = {}
        for flow, event, function in spawns(self.program):
            if flow.is_entry:  # a called function's spawn is judged in its callers, which say what it is given
                key = id(function.node)
                spawned[key] = spawned.get(key, True) and _spawns_whole_job(flow, event)
        return spawned

    @cached_property
    def started(self) -> set[int]:
        """Each function a new process of this machine runs (by the id of its node): mp.spawn's, and a
        `multiprocessing.Process`'s `target=`."""
        from fsdplint.rulekit import process_starts

        return set(self.spawned) | {id(function.node) for flow, _, function in process_starts(self.program) if flow.is_entry}

    def shown(self, flow, event, from_group: bool = False) -> bool:
        """The run of `event` in `flow` is on one machine, on every path the program shows to it;
        `from_group`: the rank it uses was asked of the process group (a call), not read from the environment."""
        if self._shown_on(flow, event, from_group):
            return True
        if flow.is_entry:
            return False
        reaching = self.reaching(event)
        return bool(reaching) and all(self._shown_on(entry, inlined, from_group) for entry, inlined in reaching)

    def reaching(self, event) -> list:
        """The events of the flows no flow calls that are `event`, inlined there through calls, each with its flow."""
        return [(flow, inlined) for flow, inlined in self._entry_events.get(id(event.node), ()) if inlined.kind == event.kind]

    @cached_property
    def _entry_events(self) -> dict[int, list]:
        """The events of the flows no flow calls, by the id of their node."""
        events: dict[int, list] = {}
        for flow in self.program.flows:
            if flow.is_entry:
                for event in flow.events:
                    events.setdefault(id(event.node), []).append((flow, event))
        return events

    def _shown_on(self, flow, event, from_group: bool) -> bool:
        from fsdplint import distributed
        from fsdplint.model import CALL

        is_spawned = flow.is_entry and flow.function is not None and id(flow.function.node) in self.spawned
        if is_spawned and self.spawned[id(flow.function.node)]:
            return True
        inits = [init for init in flow.of_kind(CALL) if init.qname == distributed.INIT_PROCESS_GROUP]
        if any(init.on_every_path_to(event) and (_meets_locally(flow, init) or _world_of_one_machine(flow, init)
                                                 or is_spawned and _spawn_index_in_fixed_world(flow, init))
               for init in inits):
            return True
        # A new process has no group but the ones it starts: where each it may have started before the
        # event meets locally, a rank the group gives (`get_rank()`) is on this machine (nvidia-resiliency-ext's
        # `mp_ctx.Process` workers meet at 127.0.0.1 or at a file store, one `if` arm each).
        is_started = flow.is_entry and flow.function is not None and id(flow.function.node) in self.started
        before = [init for init in inits if init.index < event.index and not init.excludes(event)]
        return is_started and from_group and bool(before) and all(_meets_locally(flow, init) for init in before)


def _spawns_whole_job(flow, spawn) -> bool:
    """`mp.spawn(fn, nprocs=torch.cuda.device_count())`, a literal count, or none (one process): one
    process starts them all, on its machine, as many as it has GPUs or as the code fixes."""
    import libcst as cst

    nprocs = spawn.argument(2, "nprocs")
    if nprocs is None:
        return not any(arg.star for arg in spawn.node.args)  # `mp.spawn(fn, **options)` may pass it
    return type(nprocs[0]) is cst.Integer or _counts_devices(flow, nprocs[1], spawn.index)


def _counts_devices(flow, count, before: int) -> bool:
    """`count` is `torch.cuda.device_count()` (or another accelerator's): the call that made it, given
    here, or the one its variable (or the parameter a caller passed it to) was built by."""
    from fsdplint import distributed

    made_by = count.event.qname if count.event else flow.constructor(count.ref.root, before) if count.ref else None
    return made_by in distributed.DEVICE_COUNTS


def _world_of_one_machine(flow, init) -> bool:
    """`init_process_group(..., world_size=torch.cuda.device_count())`: as many processes as this
    machine has GPUs, which a second machine's processes would outnumber (moonbucks/parallelism_practices)."""
    world_size = init.argument(3, "world_size")
    return world_size is not None and _counts_devices(flow, world_size[1], init.index)


def _meets_locally(flow, init) -> bool:
    """`init_process_group(init_method="file://...")` or `"tcp://localhost:..."` (a literal, or a string
    the model knows: `f"tcp://{host}:{port}"` with `host` passed `"localhost"`), `store=FileStore(...)`,
    or the default `env://` after `os.environ["MASTER_ADDR"] = "localhost"` on every path to it: a
    meeting place only processes of one machine reach."""
    from fsdplint import distributed
    from fsdplint.rulekit import environment_set_before, reads_environment

    if reads_environment(init):
        return not environment_set_before(flow, init, distributed.MASTER_ADDRESS_VARIABLE).isdisjoint(distributed.LOOPBACK_HOSTS)
    method = init.argument(1, "init_method")
    if method is not None and method[1].text != "env://":
        return (method[1].text or "").startswith(distributed.LOCAL_INIT_METHODS)
    made = flow.origin(init.argument(5, "store")[1], init.index)
    return made is not None and made.qname in distributed.LOCAL_STORES


def _spawn_index_in_fixed_world(flow, init) -> bool:
    """`init_process_group(rank=index, world_size=2)` in a function mp.spawn starts, `index` its first
    parameter as given: the ranks are the spawned processes' indices, and the world no more than them."""
    import libcst as cst

    rank, world_size = init.argument(4, "rank"), init.argument(3, "world_size")
    if rank is None or world_size is None or type(world_size[0]) is not cst.Integer or not flow.function.params:
        return False
    index = flow.function.params[0]
    # Never bound again: after `rank = node * nprocs + rank` it is no longer the index.
    return rank[1].ref is not None and rank[1].ref.root == index and index not in flow.assigned_roots
