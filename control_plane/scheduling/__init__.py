"""Pure scheduling core: placement, quotas, fair share, preemption, transitions (no I/O)."""

from control_plane.scheduling.cluster import (
    ClusterState,
    ClusterStateError,
    DoubleAssignment,
    GpuSlot,
    NotAssigned,
)
from control_plane.scheduling.placement import PlacementRequest, place
from control_plane.scheduling.preemption import HoldView, Preemption, choose_preemptions
from control_plane.scheduling.transitions import IllegalTransition, check_transition

__all__ = [
    "ClusterState",
    "ClusterStateError",
    "DoubleAssignment",
    "GpuSlot",
    "HoldView",
    "IllegalTransition",
    "NotAssigned",
    "PlacementRequest",
    "Preemption",
    "check_transition",
    "choose_preemptions",
    "place",
]
