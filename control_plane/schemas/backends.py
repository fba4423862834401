"""The pool-backend contract: how a hold becomes warm GPUs on a pool, and what backends report.

A *backend* is where GPUs come from. jitgpu's own node agents are one; a Slurm cluster (the
`jitgpu slurm-bridge`) is the second. Every backend registers its GPUs as nodes
(`POST /v1/nodes`), heartbeats for them and pulls their assignments; the control plane keeps
tenants, quotas, budgets, holds and the prediction log the same whichever backend serves a
hold. Five verbs, each driven by what the heartbeat reply asks the node to keep:

- **place**: a hold appears in a node's assignments (the control plane placed it on that
  node's GPUs at `start_at - lead_s`). Node agents note it; Slurm makes a MAGNETIC
  reservation `jitgpu-<hold id>` on the node for the hold's window and tenant's Slurm user.
- **warm**: make the GPUs usable by `start_at`. Node agents run the warm-up profile; Slurm
  powers a powered-down node up early enough (its measured resume latency). Either reports
  `POST /v1/nodes/{id}/holds/{hold}/warmup` (`started`, then `ok`).
- **keep**: while the hold is active, keep the GPUs for its tenant only. Node agents keep the
  CUDA context; Slurm keeps the reservation (other users' jobs wait at most until it ends).
- **release**: the hold left the assignments (expired, cancelled, preempted): give the GPUs
  back. Node agents drop the context; Slurm deletes the reservation, letting the node suspend.
- **claim**: the tenant's job took the GPUs. On node agents the client claims through the
  API. On Slurm the user's own `sbatch` lands in the reservation; the backend reports it with
  `POST /v1/nodes/{id}/holds/{hold}/backend-event` (`kind: claimed`), with the scheduler's own
  submit and start times, so time-to-GPU is the backend's, not the bridge's polling delay.

A backend that loses a hold outside jitgpu (an admin deleted the reservation, the node never
booted) reports `kind: ended` or `kind: failed`; the hold ends and is never re-created.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, Field

from control_plane.schemas.allocations import Allocation, Hold
from control_plane.schemas.common import Label, ReportedText, UtcDatetime, WireModel
from control_plane.schemas.nodes import NodeAssignment


class BackendEventKind(StrEnum):
    CLAIMED = "claimed"  # a job of the hold's tenant took the held GPUs
    ENDED = "ended"  # the backend's hold is gone (an admin removed it): end the hold
    FAILED = "failed"  # the backend could not make the GPUs usable (the node never booted)


class BackendEvent(WireModel):
    kind: BackendEventKind
    job_id: Label | None = Field(
        default=None, description="The backend's job id (claimed): e.g. a Slurm job id."
    )
    submitted_at: UtcDatetime | None = Field(
        default=None, description="When the job was submitted, by the backend's clock."
    )
    started_at: UtcDatetime | None = Field(
        default=None, description="When the job started on the held GPUs, by the backend."
    )
    reason: ReportedText | None = None


class BackendEventReply(BaseModel):
    hold: Hold
    allocation: Allocation | None = Field(
        default=None, description="The allocation a claim made (time_to_gpu_s from the backend)."
    )


class PoolBackend(Protocol):
    """What a backend does for each node's assignments; see the module docstring."""

    def place(self, node: str, hold: NodeAssignment) -> None: ...

    def warm(self, node: str, hold: NodeAssignment) -> None: ...

    def keep(self, node: str, hold: NodeAssignment) -> None: ...

    def release(self, node: str, hold_id: str) -> None: ...

    def claimed(self, node: str, hold_id: str) -> BackendEvent | None:
        """The claim the backend saw for this hold, if any (reported once)."""
        ...
