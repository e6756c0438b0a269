from __future__ import annotations

from typing import Iterable

from fsdplint.rule import Finding, FixAvailability, Rule, Severity


class MeshShapeForFullyShard(Rule):
    """
    ## What it does
    Finds `fully_shard(..., mesh=mesh)` where `mesh` was built by `init_device_mesh` with more than
    two dimensions, or with two dimensions and no `mesh_dim_names`.

    Only a mesh the model follows from `init_device_mesh` to the call, with its shape written as a
    tuple or list in the call, is checked: a slice of it (`mesh["dp"]`), a mesh a helper returns or
    a parameter no caller passes is not.

    ## Why is this bad?
    `fully_shard` shards over a 1-D mesh (FSDP) or replicates over the first dimension of a 2-D
    mesh and shards over the second (HSDP). A 3-D mesh (data, tensor and pipeline parallel in one)
    is refused: `ValueError: fully_shard expects a 1D or 2D DeviceMesh but got DeviceMesh(...)`.
    A 2-D mesh must name its dimensions: `AssertionError: Please init the 2D mesh for HSDP with
    mesh_dim_names specified`. The script stops at the call.

    ## Example
    ```python
    mesh = init_device_mesh("cuda", (2, 2, 2), mesh_dim_names=("dp", "tp", "pp"))
    fully_shard(model, mesh=mesh)
    ```

    ## Use instead
    ```python
    mesh = init_device_mesh("cuda", (2, 2, 2), mesh_dim_names=("dp", "tp", "pp"))
    fully_shard(model, mesh=mesh["dp"])
    ```

    For HSDP, name the two dimensions:
    `init_device_mesh("cuda", (2, 4), mesh_dim_names=("replicate", "shard"))`.

    ## Fix safety
    No fix: which dimensions the data-parallel ones are is a choice about the job.

    ## References
    - [fully_shard](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
    - [init_device_mesh](https://pytorch.org/docs/stable/distributed.html#torch.distributed.device_mesh.init_device_mesh)
    """

    code = "FSDP112"
    name = "mesh-shape-for-fully-shard"
    summary = "`fully_shard` given a mesh of more than two dimensions, or a 2-D mesh without dimension names"
    severity = Severity.ERROR
    fix_availability = FixAvailability.NONE
    trigger_tokens = ("fully_shard", "init_device_mesh")

    def check(self, program) -> Iterable[Finding]:
        import libcst as cst

        from fsdplint import distributed
        from fsdplint.model import CALL
        from fsdplint.rulekit import at, calls, code, via, where

        for flow in program.flows:
            for event in flow.shard_events(fsdp=2):
                mesh = event.kwargs.get("mesh")
                # The mesh itself, not a slice of it (`mesh["dp"]`, a `[]` step) or an attribute.
                if mesh is None or (mesh.event is None and (mesh.ref is None or mesh.ref.path)):
                    continue
                built = flow.origin(mesh, event.index)
                if built is None or built.kind != CALL or built.qname not in distributed.INIT_DEVICE_MESH or any(arg.star for arg in built.node.args):
                    continue
                shape = built.argument(1, "mesh_shape")
                if shape is None or not isinstance(shape[0], (cst.Tuple, cst.List)) \
                        or any(isinstance(element, cst.StarredElement) for element in shape[0].elements):
                    continue
                dimensions = len(shape[0].elements)
                names = built.argument(None, "mesh_dim_names")
                unnamed = names is None or isinstance(names[0], cst.Name) and names[0].value == "None"
                mesh_code = code(event, event.argument(None, "mesh")[0])
                made = f"`{mesh_code}` is built at {where(built)} by `init_device_mesh` with shape `{code(built, shape[0])}`"
                if dimensions > 2:
                    message = (f"{made}, {dimensions} dimensions{via(event)}: `fully_shard` takes a 1-D (FSDP) or 2-D (HSDP) mesh and raises "
                               f"`ValueError` (\"fully_shard expects a 1D or 2D DeviceMesh\"); pass the data-parallel dimensions: `{mesh_code}[\"<name>\"]`")
                elif dimensions == 2 and unnamed:
                    message = (f"{made} and no `mesh_dim_names`{via(event)}: `fully_shard` raises `AssertionError` for a 2-D mesh without "
                               f"names (\"Please init the 2D mesh for HSDP with mesh_dim_names specified\"); "
                               f"name them: `mesh_dim_names=(\"replicate\", \"shard\")`")
                else:
                    continue
                yield Finding(event.file, event.node, message, related=(at(built, "mesh built here"), *calls(flow, event)))
