"""Small helpers rules share for messages and fix placement. They read the model; they derive nothing."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterator

from fsdplint import distributed

if TYPE_CHECKING:
    import libcst as cst

    from fsdplint.fixes import Fix
    from fsdplint.model import Event, FileModel, Flow, FunctionInfo, Ref, Value
    from fsdplint.rule import Related


# nn containers with no forward of their own, and how to iterate the modules they hold.
FORWARDLESS_CONTAINERS = {"ModuleList": "", "ModuleDict": ".values()"}


def forwardless_container(flow: Flow, event: Event) -> str | None:
    """`ModuleList`/`ModuleDict` when the module `event` shards was built as one: by the call handed
    over (`fully_shard(nn.ModuleList(...))`), the one its variable was bound to, or what the classes of
    the run assign to the attribute (`self.blocks = nn.ModuleList(...)`)."""
    module = event.args[0] if event.args else None
    if module is None:
        return None
    made = flow.origin(module, event.index)
    if made is not None and made.qname:
        kind = made.qname.rsplit(".", 1)[-1]
        return kind if kind in FORWARDLESS_CONTAINERS else None
    if module.ref is not None and module.ref.path:
        attribute = module.ref.path[-1]
        files = flow.program.files_assigning(attribute) if attribute.isidentifier() else []
        assigned = set().union(*(file.attribute_types.get(attribute, set()) for file in files))
        if len(assigned) == 1 and next(iter(assigned)) in FORWARDLESS_CONTAINERS:
            return next(iter(assigned))
    return None


def where(event: Event) -> str:
    """`train.py:12`, the place of an event, for messages that point at a second place."""
    return f"{event.file.display}:{event.file.position(event.node).start.line}"


def via(event: Event) -> str:
    """` (via main → setup → shard_model)` when the event was reached through calls."""
    return f" (via {' → '.join(event.chain)})" if len(event.chain) > 1 else ""


def at(event: Event, message: str) -> Related:
    """The place of `event`, as a related location of a finding elsewhere ("sharded here")."""
    from fsdplint.rule import Related

    return Related(event.file, event.node, message)


def calls(flow: Flow, event: Event, below: cst.Call | None = None) -> tuple[Related, ...]:
    """The calls that led from the flow's own function into the helper holding `event`, outermost
    first, as related locations ("`setup` called here"); with `below`, the call a finding is reported
    on, only the calls under it."""
    from fsdplint.rule import Related

    steps = list(zip(_entries(flow, event), event.chain[1:]))
    if below is not None:
        steps = steps[next((depth for depth, (entry, _) in enumerate(steps) if entry.node is below), -1) + 1:]
    return tuple(Related(entry.file, entry.node, f"`{name}` called here") for entry, name in steps)


def caller_site(flow: Flow, event: Event, other: Event) -> Event | None:
    """The call, in the deepest function that runs both `event` and `other`, into the helper holding
    `event` (its ENTER event). That caller orders the two: a finding about their order belongs on its
    call, not on the helper's line, which is right. None when `event` is in that function itself, or
    the call is a decorator's wrapper calling the function it wraps (not the user's call)."""
    shared = 0
    while shared < min(len(event.call_sites), len(other.call_sites)) and event.call_sites[shared] is other.call_sites[shared]:
        shared += 1
    entries = _entries(flow, event)
    if shared >= len(entries):
        return None
    entry = entries[shared]
    # A wrapper's events carry the chain of the function that called the decorated one, not its own name.
    in_wrapper = entry.function is not None and entry.function.name != entry.chain[-1]
    return None if in_wrapper else entry


def _entries(flow: Flow, event: Event) -> list[Event]:
    """The ENTER event of each call in `event.call_sites`, outermost first: it knows the call's file,
    statement and block, which the call node alone does not."""
    from fsdplint.model import ENTER

    entries: list[Event] = []
    for depth, call in enumerate(event.call_sites):
        outer_calls = event.call_sites[:depth]
        entry = next((e for e in flow.of_kind(ENTER) if e.node is call and len(e.call_sites) == depth
                      and all(a is b for a, b in zip(e.call_sites, outer_calls))), None)
        if entry is None:
            break
        entries.append(entry)
    return entries


def code(event: Event, node: cst.CSTNode) -> str:
    return event.file.code(node).strip()


def anchor_in_block(first: Event, later: Event) -> cst.CSTNode | None:
    """The statement of `first`'s block that holds `later`: itself, a loop around it, or the call of
    the helper it runs in.

    Both are events of one flow. None when `later` is not inside that block (in another function, or
    in a call made elsewhere).
    """
    block = first.outer + first.parents
    path = later.outer + later.parents + (later.statement,)
    if len(path) <= len(block) or any(a is not b for a, b in zip(block, path)):
        return None
    return _within_function(first, path[len(block)])


def is_simple_statement(node: cst.CSTNode) -> bool:
    import libcst as cst

    return isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1


def local_name(flow: Flow, ref: Ref) -> str | None:
    """The name a ref has in the flow's own function, if it is a plain variable there: the variable as
    written, whichever of its bindings the ref is (`sampler` for `sampler#2`)."""
    if ref.path or "@" in ref.root:
        return None
    return ref.variable


def unused_name(event: Event, preferred: str) -> str:
    """`preferred`, or `preferred_2`… if the function holding `event` already uses that name."""
    import libcst as cst

    if event.function:
        scope = event.file.code(event.function.node)
    else:  # module level: its own statements, not the bodies of its functions and classes
        module = event.file.module
        scope = "".join(module.code_for_node(s) for s in module.body if not isinstance(s, (cst.FunctionDef, cst.ClassDef)))
    candidate, number = preferred, 1
    while re.search(rf"\b{re.escape(candidate)}\b", scope):
        number += 1
        candidate = f"{preferred}_{number}"
    return candidate


def statement_after_loops(events: list[Event]) -> cst.CSTNode | None:
    """Where code that must follow all `events` goes: after the loops that hold them.

    The events must come from one function (not through calls). The anchor is the statement at the
    deepest block the events share, outside the outermost loop around them.
    """
    import libcst as cst

    if not events or len(events[0].chain) != 1 or any(e.chain != events[0].chain or e.file is not events[0].file for e in events):
        return None
    common = list(events[0].parents)
    for event in events[1:]:
        depth = 0
        while depth < min(len(common), len(event.parents)) and common[depth] is event.parents[depth]:
            depth += 1
        common = common[:depth]
    loops = [index for index, node in enumerate(common) if isinstance(node, (cst.For, cst.While))]
    if loops:
        common = common[:loops[0]]
    last = events[-1]
    return _within_function(last, (last.parents + (last.statement,))[len(common)])


# Calls every argument of which names a device or a device index.
DEVICE_CALLS = frozenset({
    "torch.cuda.set_device", "torch.accelerator.set_device_index", "torch.cuda.device", "torch.accelerator.device_index", "torch.device",
    "torch.set_default_device",  # where tensors made without a device go, and the collectives on them
})
_DEVICE_METHODS = frozenset({"cuda", "to"})  # their first argument names a device
_DEVICE_KEYWORDS = frozenset({"device", "device_id", "device_ids"})  # of any call


def device_arguments(event: Event) -> Iterator[tuple[cst.CSTNode, Value]]:
    """The arguments of a call that name a device or a device index, each with its value: every one
    of `torch.cuda.set_device(...)` or `torch.device(...)`, the first of `x.cuda(...)` or `x.to(...)`,
    and `device=`, `device_id=` or each element of `device_ids=[...]` of any call."""
    import libcst as cst

    from fsdplint.model import CALL

    # `Net().cuda(i)` is a CALL the model could not resolve, `model.cuda(i)` a METHOD.
    method = event.node.func.attr.value if isinstance(event.node.func, cst.Attribute) else None
    every = event.kind == CALL and event.qname in DEVICE_CALLS
    first = not every and method in _DEVICE_METHODS and not distributed.is_torch_name(event.qname or "")
    if not (every or first) and _DEVICE_KEYWORDS.isdisjoint(event.kwargs):
        return  # most calls: nothing to pair up
    positional, keywords = event.argument_values()
    if every:
        yield from positional
    elif first:
        yield from positional[:1]
    for keyword, (node, value) in keywords.items():
        if keyword not in _DEVICE_KEYWORDS:
            continue
        if isinstance(node, (cst.List, cst.Tuple)) and value.elements is not None:
            yield from zip((element.value for element in node.elements), value.elements)
        else:
            yield node, value


def written_device_type(event: Event, node: cst.CSTNode) -> str | None:
    """`cpu` for `"cpu"`, `"cpu:0"` or `torch.device("cpu")` written as such in the event's call; None
    for anything computed."""
    import libcst as cst

    if type(node) is cst.SimpleString:
        return str(node.evaluated_value).split(":")[0]
    if type(node) is cst.Call and event.file.qualify(node.func) == "torch.device" and node.args \
            and type(node.args[0].value) is cst.SimpleString and node.args[0].keyword is None:
        return str(node.args[0].value.evaluated_value).split(":")[0]
    return None


def over_a_group(event: Event) -> bool:
    """A collective given a process group (`group=`, `process_group=`, or at the group's position:
    `dist.barrier(self.pp_group)`), not the default group of every rank."""

    name = (event.qname or "").rsplit(".", 1)[-1]
    position = distributed.PROCESS_GROUP_COLLECTIVES.get(name) if event.qname and distributed.is_process_group_collective(event.qname) else None
    return "process_group" in event.kwargs or event.argument(position, "group") is not None


def script_flows(program) -> Iterator[Flow]:
    """The flows that run a script from start to end: each file's top level (with `main()` and what it
    calls inlined), the functions `torch.multiprocessing.spawn(fn, ...)` starts, and those a script's
    top level hands a command line dispatcher (`fire.Fire(main)`, kaistAI/Effects-of-Context-in-
    Instruction-Tuning), which runs it as the script. A function no checked file calls may be called by
    code fsdplint cannot see, which may do what it lacks."""
    from fsdplint.model import CALL

    started = {id(function.node) for _, _, function in spawns(program)}
    started |= {id(function.node) for flow in program.flows if flow.function is None for event in flow.of_kind(CALL)
                if event.qname in distributed.SCRIPT_DISPATCHERS and (function := _function_passed(program, event, event.argument(0, "component"))) is not None}
    for flow in program.flows:
        if flow.function is None or (flow.is_entry and id(flow.function.node) in started):
            yield flow


def spawns(program) -> Iterator[tuple[Flow, Event, FunctionInfo]]:
    """Each `torch.multiprocessing.spawn(fn, ...)` (or `start_processes`) in each flow, with the function
    of the run it starts in new processes: `fn` is passed, not called, so the model does not walk into
    it. (Not `multiprocessing.Process(target=fn, args=...)`: what `fn`'s parameters hold there, which
    the flow of `fn` does not know, decides what it does, such as its backend's default.)"""
    from fsdplint.model import CALL

    for flow in program.flows:
        for event in flow.of_kind(CALL):
            function = _function_passed(program, event, event.argument(0, "fn")) if event.qname in distributed.PROCESS_SPAWNERS else None
            if function is not None:
                yield flow, event, function


def process_starts(program) -> Iterator[tuple[Flow, Event, FunctionInfo]]:
    """Each `multiprocessing.Process(target=fn, ...)` (or a start method context's `ctx.Process`) in each
    flow, with the function of the run it runs in a new process of this machine."""
    import libcst as cst

    from fsdplint.model import CALL, METHOD

    for flow in program.flows:
        for event in flow.of_kind(CALL, METHOD):
            # `multiprocessing.Process(...)`, else `ctx.Process(...)` of a context the model does not know (a
            # fixture's, or `multiprocessing.get_context("spawn").Process(...)`).
            func = getattr(event.node, "func", None)
            is_start = event.qname in distributed.PROCESS_CLASSES or event.qname is None and type(func) is cst.Attribute \
                and func.attr.value == distributed.PROCESS_CLASS_NAME
            function = _function_passed(program, event, event.argument(None, "target")) if is_start else None
            if function is not None:
                yield flow, event, function


def _function_passed(program, event: Event, passed: tuple[cst.CSTNode, Value] | None) -> FunctionInfo | None:
    """The function of the run an argument passes (not calls): a value that is one, or a name of one."""
    if passed is None:
        return None
    node, value = passed
    return value.callees[0] if len(value.callees) == 1 else program.resolve_callable(event.file, event.function, node)


def is_backward(event: Event) -> bool:
    """`loss.backward()`, `model(x).sum().backward()`, `accelerator.backward(loss)`, `scaler.scale(loss).backward()`."""
    import libcst as cst

    node = event.node
    return event.method == "backward" or type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "backward"


def backward_sources(flow: Flow, event: Event) -> set[str] | None:
    """The roots the loss of a backward (`is_backward`) was computed from (`loss.backward()`,
    `accelerator.backward(loss)`), where the model knows its variable; None where it does not
    (`model(x).sum().backward()`, `scaler.scale(loss).backward()`)."""
    loss = event.target if event.method == "backward" else event.args[0].ref if event.args else None
    return {loss.root} | flow.computed_from(loss.root) if loss is not None else None


def starts_one_process(flow: Flow, event: Event) -> bool:
    """`init_process_group(..., world_size=1)`, or the default `env://` init after
    `os.environ["WORLD_SIZE"] = "1"` on every path to it (PRIME-RL/TTRL's checkpoint converter): a
    process group of one process, where no other rank trains, waits or takes a GPU."""
    if event.qname != distributed.INIT_PROCESS_GROUP:
        return False
    world_size = event.argument(3, "world_size")  # init_process_group(backend, init_method, timeout, world_size, ...)
    if world_size is not None:
        return world_size[1].constant == "1"
    return reads_environment(event) and "1" in environment_set_before(flow, event, distributed.WORLD_SIZE_VARIABLE)


def reads_environment(init: Event) -> bool:
    """The `init_process_group` meets the other processes by the default `env://`: no other
    `init_method` (nor one the model does not know) and no `store`."""
    method = init.argument(1, "init_method")
    return (method is None or method[1].text == "env://") and init.argument(5, "store") is None


def environment_set_before(flow: Flow, event: Event, variable: str) -> set[str]:
    """The texts the model knows `os.environ[variable]` is set to before `event`, on every path to it
    (`os.environ["MASTER_ADDR"] = "localhost"`; not by a `setdefault`, which keeps a value set before
    the script ran)."""
    from fsdplint.model import SET_ENV

    return {setting.value.text for setting in flow.of_kind(SET_ENV) if setting.index < event.index and setting.variable == variable
            and setting.on_every_path_to(event) and not setting.only_if_unset and setting.value.text is not None}


def process_group_backend(event: Event) -> str | None:
    """The backend an `init_process_group` call names as a string the model knows (`"nccl"`,
    `"cpu:gloo,cuda:nccl"`, a name assigned one); None when it names none or computes it."""
    from fsdplint.model import UNKNOWN_PART

    backend = event.argument(0, "backend")
    text = backend[1].text if backend is not None else None
    return text if text is not None and UNKNOWN_PART not in text else None


def qualified_reference(file: FileModel, qualified: str) -> str | None:
    """How the file's code can name `qualified` (`dist` for `torch.distributed`), if it imports it."""
    for local, target in file.imports.items():
        if target == qualified:
            return local
    head = qualified.split(".")[0]
    return qualified if file.imports.get(head) == head else None


def safe_where_sharded(fix: Fix | None, shard: Event, event: Event | None) -> Fix | None:
    """`fix`, which calls API of the module `shard` shards or wraps (or needs the process group a wrap
    starts), unsafe where that runs on some paths to `event` only (`if args.fsdp: fully_shard(model)`):
    the module of the other paths (a plain or DDP one) has no such method, and there may be no group.
    `event` None: the shard is in another flow (a constructor's, `self.model = FSDP(...)`), and counts
    where it runs wherever that flow runs, in no arm."""
    import dataclasses

    everywhere = shard.on_every_path_to(event) if event is not None else not shard.arms
    return fix if fix is None or not fix.safe or everywhere else dataclasses.replace(fix, safe=False)


def no_sync_fix(event: Event) -> Fix | None:
    """`with m.no_sync(): body` -> `m.set_requires_gradient_sync(False)` + `try: body finally: ...(True)`.

    Exception-safe like `no_sync` itself; None when the `with` has other items, `as`, or is async.
    """
    import libcst as cst

    from fsdplint.fixes import Fix, Replace

    statement = event.statement if event.with_item else None
    if not isinstance(statement, cst.With) or len(statement.items) != 1 or statement.asynchronous or statement.items[0].asname:
        return None

    def rewrite(with_node: cst.With):
        receiver = with_node.items[0].item.func.value

        def toggle(value: str) -> cst.SimpleStatementLine:
            call = cst.Call(cst.Attribute(receiver, cst.Name("set_requires_gradient_sync")), [cst.Arg(cst.Name(value))])
            return cst.SimpleStatementLine([cst.Expr(call)])

        restore = cst.Finally(body=cst.IndentedBlock([toggle("True")]))
        body, off = with_node.body, toggle("False").with_changes(leading_lines=with_node.leading_lines)
        if isinstance(body, cst.IndentedBlock):
            # The comment after `with ...:` stays on the line that replaces it, not on `try:`.
            off = off.with_changes(trailing_whitespace=body.header)
            body = body.with_changes(header=cst.TrailingWhitespace())
        return cst.FlattenSentinel([off, cst.Try(body=body, finalbody=restore)])

    return Fix("Replace `no_sync()` with `set_requires_gradient_sync(False)`/`(True)` around the body", safe=True,
               operations=[Replace(statement, rewrite)])


def is_leaf_or_part(flow: Flow, root: Ref, shards: list[Event], at: Event) -> bool:
    """Whether a module sharded (or wrapped) whole at `at` is fine as one unit: one known to hold no
    block of layers (a single layer, a `Sequential` of layers, a class that builds only layers: see
    model.modules), and a module taken from another sharded model (`module = get_module(model, path)`),
    which is one of that model's units."""
    from fsdplint.model.modules import holds_no_blocks

    return holds_no_blocks(flow, root, at.index + 1) or taken_from_sharded(flow, root, shards)  # `at` included: `model = FSDP(Net())`


def taken_from_sharded(flow: Flow, root: Ref, shards: list[Event]) -> bool:
    """The module was computed from a module that `shards` shard (`language_model = get_language_model(model)`,
    a call this run does not follow): it may be that module or a part of it."""
    sources = flow.computed_from(root.root) - {root.root}
    return any(t.root in sources for event in shards for t in event.targets)


def _within_function(event: Event, statement: cst.CSTNode) -> cst.CSTNode | None:
    """`statement`, unless it is the def of a one-line function (`def f(): a(); b()`) holding `event`:
    code placed around the def would run outside the function."""
    return None if event.function is not None and statement is event.function.node else statement


def iterates(flow: Flow, value: Value | None, ref: Ref) -> bool:
    """Whether looping over `value` loops over `ref` (a data loader): itself, `enumerate(ref)`, a
    progress bar around it (`tqdm(loader)`) or a copy of it (`copy.deepcopy(loader)`, also handed to
    a function as its loader: the same sampler at the same epoch)."""
    from fsdplint.model import CALL

    while value is not None:
        if any(mine is not None and (mine == ref or not mine.path and flow.copies.get(mine.root) == ref) for mine in (value.ref, value.iterates)):
            return True
        made = value.event
        if made is None or made.kind != CALL or made.qname not in distributed.ITERATE_AS_GIVEN or not made.args:
            return False
        value = made.args[0]
    return False


def handed_over(events: list[Event], roots: set[str]) -> Event | None:
    """The first of `events` that hands a value of `roots` to code fsdplint does not follow (a method
    of a framework's object, a function of a library): what that code does with it is not known.
    torch's functions, builtins, progress bars, copies and the calls the model followed (a method of
    the run, whose events are among `events`) do not count."""
    from fsdplint.model import CALL, CALL_VALUE, ENTER, METHOD
    from fsdplint.model.names import BUILTINS

    followed = {id(event.node) for event in events if event.kind == ENTER}
    for event in events:
        # An element of a loader (`model(batch)`) is a batch, not the loader.
        if event.kind not in (CALL, METHOD, CALL_VALUE) or id(event.node) in followed \
                or not any(ref.root in roots and ref.path[:1] != ("[]",) for ref in event.arg_refs()):
            continue
        if event.kind == CALL and (distributed.is_torch_name(event.qname or "") or event.qname in BUILTINS or event.qname in distributed.ITERATE_AS_GIVEN):
            continue
        return event
    return None


def rebound(events: list[Event], made: Event) -> bool:
    """Whether the variable `made`'s result was assigned to is assigned again by a statement of one of
    `events` in the same function call, on a path through `made` (`train_loader, model = accelerator.prepare(train_loader, model)`):
    the model keeps one value for a name rebound from itself, but the object may be another."""
    import libcst as cst

    if made.binding is None:
        return False
    name = made.binding.name
    for event in events:
        if event.index <= made.index or event.chain != made.chain or event.call_sites != made.call_sites or event.exclusive(made):
            continue
        statement = event.statement
        if type(statement) is not cst.SimpleStatementLine:
            continue
        for small in statement.body:
            targets = [target.target for target in small.targets] if type(small) is cst.Assign else \
                [small.target] if type(small) in (cst.AnnAssign, cst.AugAssign) else []
            while targets:
                target = targets.pop()
                if type(target) in (cst.Tuple, cst.List):
                    targets += [element.value for element in target.elements]
                elif type(target) is cst.StarredElement:
                    targets.append(target.value)
                elif type(target) is cst.Name and target.value == name:
                    return True
    return False
