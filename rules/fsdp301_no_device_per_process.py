from __future__ import annotations

from typing import Iterable

from fsdplint import distributed
from fsdplint.rule import Finding, FixAvailability, Rule, Severity


class NoDevicePerProcess(Rule):
    """
    ## What it does
    Finds `init_process_group("nccl")` in a script that never chooses a GPU for its process: no
    `torch.cuda.set_device(local_rank)`, `torch.accelerator.set_device_index`, `device_id=`,
    `init_device_mesh`, accelerate's `Accelerator()` (which sets the device itself), or device built
    from a rank (`torch.device("cuda", local_rank)`, `model.cuda(local_rank)`,
    `torch.set_default_device(f"cuda:{local_rank}")`).

    ## Why is this bad?
    Every process starts on GPU 0. With one process per GPU, all of them allocate on GPU 0 and NCCL
    refuses to build the group: `ncclInvalidUsage ... Duplicate GPU detected : rank 1 and rank 0 both
    on CUDA device`. The other GPUs stay idle.

    Only whole scripts are checked (a file's top level and what it calls, a function started by
    `torch.multiprocessing.spawn`, or one a command line dispatcher runs: `fire.Fire(main)`), since
    a caller fsdplint cannot see may choose the device; so may
    a constructor of the script's own classes other than modules (`Trainer(...)`) that chooses one,
    or whose class derives from a library's. Scripts
    that set `CUDA_VISIBLE_DEVICES` per process, assert that they run one process per node
    (`assert os.environ["LOCAL_RANK"] == "0"`), call a helper of their own that names a device
    (`get_device(...)`), run a single process (`world_size=1`), or use gloo are not reported; nor is a
    script that, after the initialization, neither reaches a collective, nor shards or wraps a
    module (FSDP, DDP), nor places work on a GPU (`.cuda()`, `.to(device)`, `torch.device("cuda")`):
    NCCL builds its communicators, and finds the duplicate GPU, at the first collective, and code
    fsdplint cannot see may exchange through a channel of its own (determined's examples); nor a
    test module (`test_*.py`), whose test functions pytest runs and may choose the device.

    ## Example
    ```python
    dist.init_process_group("nccl")
    model = Model().cuda()
    ```

    ## Use instead
    ```python
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    model = Model().cuda()
    ```

    ## Fix safety
    No fix: which launcher sets the local rank, and where the device should be chosen, depends on
    the script.

    ## References
    - [torch.cuda.set_device](https://pytorch.org/docs/stable/generated/torch.cuda.set_device.html)
    - [init_process_group device_id](https://pytorch.org/docs/stable/distributed.html#torch.distributed.init_process_group)
    """

    code = "FSDP301"
    name = "no-device-per-process"
    summary = "NCCL process group in a script that never chooses its process's GPU"
    severity = Severity.ERROR
    fix_availability = FixAvailability.NONE
    trigger_tokens = ("init_process_group",)

    def check(self, program) -> Iterable[Finding]:
        from fsdplint.model import CALL, GLOBAL_RANK, LOCAL_RANK, METHOD, SET_ENV
        from fsdplint.rulekit import process_group_backend, script_flows, starts_one_process

        for flow in script_flows(program):
            if flow.file.is_test:
                continue  # pytest runs its test functions, which may choose the device before any collective
            if flow.asserted_ranks & {GLOBAL_RANK, LOCAL_RANK} or any(setting.variable == "CUDA_VISIBLE_DEVICES" for setting in flow.of_kind(SET_ENV)):
                continue  # one process per node (`assert local_rank == 0`), or each process sees its own GPU
            events = list(flow.of_kind(CALL, METHOD))
            # A group of one process (`world_size=1`) runs on GPU 0, its own.
            inits = [event for event in events if event.qname == "torch.distributed.init_process_group"
                     and "nccl" in (process_group_backend(event) or "") and not starts_one_process(flow, event)]
            if not inits:
                continue
            choices = [event for event in events if _chooses_device(event)]
            for event in inits:
                if any(not choice.exclusive(event) for choice in choices):
                    continue  # a device chosen on the path of this initialization (not in another arm of a dispatch)
                if _group_used_after(flow, event) and not _builds_setup_object(flow):
                    yield Finding(event.file, event.node,
                                  "NCCL process group, but this process never chooses its GPU: every rank works on GPU 0 "
                                  "(`Duplicate GPU detected`); call `torch.cuda.set_device(int(os.environ[\"LOCAL_RANK\"]))` "
                                  "before it, or pass `device_id=`")


def _group_used_after(flow, init) -> bool:
    """After the initialization, on its path, the script uses the group or a GPU: a collective, a
    module sharded or wrapped (FSDP, DDP), or work placed on a device that is not the CPU
    (`model.cuda()`, `.to(device)`, `torch.device("cuda")`). Code fsdplint cannot see and work on the
    CPU say nothing of it: determined's examples start NCCL only to read the rank and exchange
    through a channel of their own; ChatLearn's rendezvous check starts the group and destroys it."""
    from fsdplint.model import CALL, METHOD, SHARD, WRAP

    for event in flow.events[init.index + 1:]:
        if event.excludes(init):
            continue
        if event.kind in (SHARD, WRAP) or event.kind == CALL and event.qname in distributed.DATA_PARALLEL_WRAPPERS \
                or flow.collective(event) or event.kind in (CALL, METHOD) and _places_on_a_device(event):
            return True
    return False


def _places_on_a_device(event) -> bool:
    """`x.cuda()`, or a device argument (`.to(device)`, `torch.device(...)`, `device=`) that is not
    known to name the CPU or the meta device (a dtype given to `.to` is none)."""
    import libcst as cst

    from fsdplint.rulekit import device_arguments

    func = getattr(event.node, "func", None)
    if type(func) is cst.Attribute and func.attr.value == "cuda" and not distributed.is_torch_name(event.qname or ""):
        return True  # `model.cuda()`, and `Net().cuda()`, a call the model could not resolve
    return any(not value.dtypes and not (value.text or "").startswith(("cpu", "meta")) for _, value in device_arguments(event))


def _builds_setup_object(flow) -> bool:
    """The script builds an object of a class of the run that is not known to be a module (a trainer,
    an evaluator) whose constructor may choose the device: it chooses one in its own code, or a base
    the run does not define runs first. A class whose constructor chooses none (AReaL's `_KKState`,
    a partitioning helper) says nothing."""
    from fsdplint.model import CALL, CALL_VALUE

    for event in flow.of_kind(CALL, CALL_VALUE):
        found = flow.program.class_of(event.file, event.node.func)
        if found is not None and not flow.program.is_module_class(*found) and _constructor_may_choose_device(flow.program, *found):
            return True
    return False


def _constructor_may_choose_device(program, file, qualname) -> bool:
    from fsdplint.model import CALL, METHOD

    if any(not isinstance(entry, tuple) and entry != "object" for entry in program.class_lineage(file, qualname)):
        return True  # a library's constructor runs: what it does is not known
    init = program.method_of_class(file, qualname, "__init__")
    if init is None:
        return False
    constructor = program.flow_of(init)
    return constructor.exhausted or any(_chooses_device(event) for event in constructor.of_kind(CALL, METHOD))


def _chooses_device(event) -> bool:
    """The event chooses a device for this process: a device-setting call, `device_id=`, a helper that
    names a device, or a device index that is not a constant (`model.cuda(local_rank)`,
    `torch.device("cuda", local_rank)`, `f"cuda:{local_rank}"`, anything computed from a rank)."""
    import libcst as cst

    from fsdplint.model import CALL, METHOD, is_rank_number
    from fsdplint.rulekit import device_arguments

    if event.kind == CALL and event.qname in distributed.DEVICE_CHOOSING_CALLS:
        return True
    callee = event.method if event.kind == METHOD else event.qname
    if not distributed.is_torch_name(event.qname or "") and "device" in (callee or "").lower():
        return True  # a helper fsdplint cannot see into, such as torchtune's `utils.get_device("cuda")`
    if event.argument(None, "device_id") is not None:
        return True
    # Whatever `x.cuda(...)` or the second argument of `torch.device` is given is an index.
    indices = {id(arg.value) for arg in event.node.args[event.qname == "torch.device":]}
    is_cuda = isinstance(event.node.func, cst.Attribute) and event.node.func.attr.value == "cuda"
    for node, value in device_arguments(event):
        # `f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"`: either arm may be the device
        arms = [node.body, node.orelse] if isinstance(node, cst.IfExp) else [node]
        if any(isinstance(arm, cst.FormattedString) for arm in arms):
            return True
        if all(isinstance(arm, (cst.Integer, cst.SimpleString)) for arm in arms):
            continue  # the same device on every rank
        if value.rank is not None or is_rank_number(value) or (id(node) in indices and (is_cuda or event.qname == "torch.device")):
            return True  # `.to(rank % torch.cuda.device_count())`, the DDP tutorial's device (shwetasalaria/workshops)
    return False
