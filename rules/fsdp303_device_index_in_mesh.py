from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity


class DeviceIndexInMesh(Rule):
    """
    ## What it does
    Finds `init_device_mesh` given a device with an index (`"cuda:0"`, `f"cuda:{local_rank}"`,
    `str(device)` of a `torch.device("cuda", i)`, or a variable or function result that holds such a
    string) or a `torch.device` object instead of a device type.

    ## Why is this bad?
    A mesh spans devices of every rank; it takes only their type. With an index it fails at once:
    `RuntimeError: ('Device type with index is not supported but got cuda:0. ', "If you maintained a
    'torch.device' object, it's recommended to pass in 'device.type'.")`. A `torch.device` object
    fails too (`AttributeError: 'torch.device' object has no attribute 'isalpha'`).

    ## Example
    ```python
    mesh = init_device_mesh(f"cuda:{local_rank}", (world_size,))
    ```

    ## Use instead
    ```python
    torch.cuda.set_device(local_rank)
    mesh = init_device_mesh("cuda", (world_size,))
    ```

    ## Fix safety
    The fix is safe: it passes the device type alone (`"cuda"`, or `device.type`), which is what
    `init_device_mesh` accepts. A string that arrives through a variable or a function has no fix. Choosing each rank's GPU is done by `torch.cuda.set_device`, which
    the index never did here.

    ## References
    - [init_device_mesh](https://pytorch.org/docs/stable/distributed.html#torch.distributed.device_mesh.init_device_mesh)
    """

    code = "FSDP303"
    name = "device-index-in-mesh"
    summary = "`init_device_mesh` given a device index or `torch.device` instead of a device type"
    severity = Severity.ERROR
    fix_availability = FixAvailability.SAFE
    trigger_tokens = ("init_device_mesh",)

    def check(self, program) -> Iterable[Finding]:
        import libcst as cst

        from fsdplint.fixes import Fix, Replace
        from fsdplint.model import CALL
        from fsdplint.rulekit import calls, code, via

        for flow in program.flows:
            devices = {event.binding: event for event in flow.of_kind(CALL) if event.qname == "torch.device" and event.binding}
            for event in flow.of_kind(CALL):
                if not (event.qname or "").endswith("device_mesh.init_device_mesh"):
                    continue
                argument = _device_type_argument(event.node)
                if argument is None:
                    continue
                replacement = _type_only(argument) or _device_object_type(flow, event, argument, devices)
                if replacement is None:
                    indexed = _indexed_text(event)
                    if indexed is not None:  # a name or a helper's result holding `f"cuda:{i}"`: no text to put instead
                        yield Finding(event.file, argument,
                                      f"`init_device_mesh` takes a device type, not `{code(event, argument)}`, which holds the device "
                                      f"with an index `{indexed}`{via(event)}: it raises `Device type with index is not supported`; "
                                      "pass the device type alone", related=calls(flow, event))
                    continue
                fix = Fix("Pass the device type alone", safe=True,
                          operations=[Replace(argument, lambda _, text=replacement: cst.parse_expression(text))])
                error = "`Device type with index is not supported`" if _type_only(argument) else "an error"
                yield Finding(event.file, argument,
                              f"`init_device_mesh` takes a device type, not `{code(event, argument)}`{via(event)}: it raises "
                              f"{error}; pass `{replacement}`", fix, related=calls(flow, event))


def _indexed_text(event) -> str | None:
    """The device string the device type argument holds when it names an index (`"cuda:0"`, `f"cuda:{i}"`
    through a variable or a function's result), with a part not known shown as `…`."""
    from fsdplint.model import UNKNOWN_PART

    value = event.args[0] if event.args else event.kwargs.get("device_type")
    if value is None or value.text is None or ":" not in value.text.replace(UNKNOWN_PART, ""):
        return None
    return value.text.replace(UNKNOWN_PART, "…")


def _device_type_argument(call):
    for position, arg in enumerate(call.args):
        if (arg.keyword is None and position == 0) or (arg.keyword is not None and arg.keyword.value == "device_type"):
            return arg.value
    return None


def _type_only(node) -> str | None:
    """`"cuda:0"` -> `"cuda"`; `f"cuda:{i}"` -> `"cuda"`; `f"{device.type}:{i}"` -> `device.type`."""
    import libcst as cst

    if isinstance(node, cst.SimpleString) and ":" in node.evaluated_value:
        return f"{node.prefix}{node.quote}{node.evaluated_value.split(':', 1)[0]}{node.quote}"
    if not isinstance(node, cst.FormattedString):
        return None
    before: list[cst.CSTNode] = []
    for part in node.parts:
        if isinstance(part, cst.FormattedStringText) and ":" in part.value:
            head = part.value.split(":", 1)[0]
            if head:
                before.append(part.with_changes(value=head))
            break
        before.append(part)
    else:
        return None  # no colon outside the replacement fields: no index
    if not before:
        return None  # `f":{i}"` names no device type to keep
    if all(isinstance(part, cst.FormattedStringText) for part in before):
        quote = node.end
        return quote + "".join(part.value for part in before) + quote
    module = cst.Module([])
    if len(before) == 1 and module.code_for_node(before[0].expression).endswith(".type") and not before[0].format_spec:
        return module.code_for_node(before[0].expression)
    return module.code_for_node(node.with_changes(parts=before))


def _device_object_type(flow, event, node, devices) -> str | None:
    """`device.type` for a `torch.device` built in this flow and passed as it is, or as `str(device)`
    when it was built with an index."""
    import libcst as cst

    from fsdplint.model import dotted_name

    as_string = isinstance(node, cst.Call) and dotted_name(node.func) == "str" and len(node.args) == 1
    holder = next((e for e in flow.events if e.node is node), None) if as_string else event
    if holder is None:
        return None
    positional, keywords = holder.argument_values()
    name, value = positional[0] if positional else keywords.get("device_type", (None, None))
    built = devices.get(value.ref) if value is not None and value.ref is not None else None
    if built is None or not isinstance(name, (cst.Name, cst.Attribute)) or (as_string and not _has_index(built.node)):
        return None
    return f"{event.file.code(name)}.type"


def _has_index(call) -> bool:
    """`torch.device("cuda", i)`, `torch.device(type="cuda", index=i)` or `torch.device("cuda:0")`."""
    args = call.args
    if len(args) >= 2 or any(arg.keyword is not None and arg.keyword.value == "index" for arg in args):
        return True
    return bool(args) and _type_only(args[0].value) is not None
