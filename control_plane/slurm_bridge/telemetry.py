"""What the bridge reports of a Slurm node's GPUs: which ones a hold may be placed on."""

from __future__ import annotations

from control_plane.schemas.nodes import GpuTelemetry
from control_plane.slurm_bridge.slurm import SlurmNode


def gpu_uuids(node: SlurmNode) -> list[str]:
    return [f"slurm-{node.name}-gpu{i}" for i in range(node.gpus)]


def gpu_report(
    node: SlurmNode, mine: dict[str, tuple[str, str]], occupied: set[str], prefix: str
) -> list[GpuTelemetry]:
    """A failed node's GPUs leave placement; a powered-down one's stay: it can boot.

    GPUs that Slurm jobs outside jitgpu use are reported unavailable, so that no hold is
    placed on them; jitgpu's own (`mine`: GPU -> (hold or allocation, its id), held or
    claimed by a job) are never among them. A job running in a hold's reservation (one of
    `occupied`, named `prefix` + hold id) uses that hold's GPUs, before and after the bridge
    reports the claim.
    """
    uuids = gpu_uuids(node)
    if node.failed:
        reason = f"Slurm node state {node.state}"
        return [GpuTelemetry(uuid=u, healthy=False, reason=reason) for u in uuids]
    claimed = sum(
        1 for kind, ident in mine.values() if kind == "allocation" or prefix + ident in occupied
    )
    busy = max(0, node.gpus_used - claimed)
    free = [u for u in uuids if u not in mine]
    taken = set(free[len(free) - busy :]) if busy else set()
    return [
        GpuTelemetry(
            uuid=u,
            healthy=u not in taken,
            reason="in use by a Slurm job outside jitgpu" if u in taken else None,
        )
        for u in uuids
    ]
