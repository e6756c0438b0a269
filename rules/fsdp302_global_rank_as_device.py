from __future__ import annotations

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
    `f"cuda:{rank}"`, `device_id=rank`, `device_ids=[rank]`.

    ## Why is this bad?
    A GPU index counts the GPUs of one machine, the global rank counts the processes of the whole
    job. On one node they agree; on the second node rank 8 asks for GPU 8 of an 8-GPU machine and
    the process dies with `RuntimeError: CUDA error: invalid device ordinal`. The index of a
    process on its own node is its local rank, which torchrun sets in `LOCAL_RANK`.

    A rank received as a parameter, such as the first argument `torch.multiprocessing.spawn` passes
    to its function on one machine, is not reported.

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
        from fsdplint.model import CALL, CALL_VALUE, GLOBAL_RANK, METHOD, WRAP
        from fsdplint.rulekit import calls, code, device_arguments, via

        for flow in program.flows:
            reported_names: set[str] = set()
            for event in flow.of_kind(CALL, METHOD, CALL_VALUE, WRAP):
                for node, value in device_arguments(event):
                    if value.rank is None or value.rank.scope != GLOBAL_RANK:
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
