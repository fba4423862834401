"""Transition tables: every legal move passes, every other move raises."""

from __future__ import annotations

import pytest

from control_plane.scheduling.transitions import (
    ALLOCATION_TRANSITIONS,
    HOLD_TRANSITIONS,
    NODE_TRANSITIONS,
    IllegalTransition,
    allowed_next,
    check_transition,
    is_final,
)
from control_plane.schemas.enums import AllocationStatus, HoldStatus, NodeStatus

H, A, N = HoldStatus, AllocationStatus, NodeStatus

LEGAL = {
    "hold": {
        (H.REQUESTED, H.PLACED),
        (H.REQUESTED, H.EXPIRED),
        (H.REQUESTED, H.CANCELLED),
        (H.REQUESTED, H.FAILED),
        (H.PLACED, H.WARMING),
        (H.PLACED, H.READY),
        (H.WARMING, H.READY),
        (H.READY, H.CLAIMED),
        # A claim before the hold is warm: the job starts when the warm-up ends.
        (H.REQUESTED, H.CLAIMED),
        (H.PLACED, H.CLAIMED),
        (H.WARMING, H.CLAIMED),
        # Re-placed on other GPUs after its node was lost.
        (H.WARMING, H.PLACED),
        (H.READY, H.PLACED),
        *(
            (s, end)
            for s in (H.PLACED, H.WARMING, H.READY)
            for end in (H.CANCELLED, H.EXPIRED, H.PREEMPTED, H.FAILED)
        ),
    },
    "allocation": {
        (A.PENDING, A.ALLOCATED),
        (A.PENDING, A.CANCELLED),
        (A.PENDING, A.EXPIRED),
        (A.ALLOCATED, A.RELEASED),
        (A.ALLOCATED, A.EXPIRED),
        (A.ALLOCATED, A.LOST),
        # Its node came back within the lease, the GPUs still free.
        (A.LOST, A.ALLOCATED),
    },
    "node": {
        (N.REGISTERING, N.ONLINE),
        (N.REGISTERING, N.OFFLINE),
        (N.ONLINE, N.DRAINING),
        (N.ONLINE, N.OFFLINE),
        (N.DRAINING, N.OFFLINE),
        (N.DRAINING, N.ONLINE),
        (N.OFFLINE, N.ONLINE),
    },
}
ENUMS = {"hold": HoldStatus, "allocation": AllocationStatus, "node": NodeStatus}


@pytest.mark.parametrize("kind", ["hold", "allocation", "node"])
def test_exactly_the_documented_moves_are_legal(kind: str) -> None:
    enum = ENUMS[kind]
    for current in enum:
        for new in enum:
            if (current, new) in LEGAL[kind]:
                check_transition(kind, current, new)
            else:
                with pytest.raises(IllegalTransition) as err:
                    check_transition(kind, current, new)
                assert err.value.current == current and err.value.new == new


def test_tables_cover_every_state_and_accept_plain_strings() -> None:
    assert set(HOLD_TRANSITIONS) == set(HoldStatus)
    assert set(ALLOCATION_TRANSITIONS) == set(AllocationStatus)
    assert set(NODE_TRANSITIONS) == set(NodeStatus)
    check_transition(HOLD_TRANSITIONS, "ready", "claimed")
    with pytest.raises(IllegalTransition, match="hold: illegal transition claimed -> ready"):
        check_transition(HOLD_TRANSITIONS, "claimed", "ready")


def test_final_states_and_unknown_names() -> None:
    assert is_final("hold", H.CLAIMED) and not is_final("hold", H.READY)
    assert is_final("allocation", A.RELEASED)
    assert allowed_next("node", N.OFFLINE) == {N.ONLINE}
    with pytest.raises(ValueError, match="unknown state"):
        allowed_next("hold", "sleeping")
    with pytest.raises(ValueError, match="unknown state machine"):
        check_transition("job", "a", "b")  # type: ignore[arg-type]
