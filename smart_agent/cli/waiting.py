"""`--wait`: one live status line (id, state, ETA) on stderr, and a clean Ctrl-C."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

import typer
from rich.live import Live
from rich.text import Text

from control_plane.schemas.allocations import Allocation, Hold
from smart_agent.cli.common import err_console

T = TypeVar("T", Hold, Allocation)

HOLD_DONE = {"ready", "claimed", "expired", "cancelled", "preempted", "failed"}


def _span(seconds: float) -> str:
    seconds = max(0, round(seconds))
    minutes, secs = divmod(seconds, 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _clock(at: datetime) -> str:
    return at.astimezone().strftime("%H:%M:%S")


def hold_line(hold: Hold, now: datetime) -> str:
    """What a hold is doing and when it should be ready, in one line."""
    head = f"hold {hold.id}: {hold.status.value}"
    place_at = hold.start_at.timestamp() - hold.lead_s
    left = place_at - now.timestamp()
    if hold.status.value == "requested" and left > 0:
        return (
            f"{head}; GPUs placed and warmed from {_clock(datetime.fromtimestamp(place_at, UTC))}"
            f" (in {_span(left)}), job expected at {_clock(hold.start_at)}"
        )
    if hold.status.value == "requested":
        return f"{head}; waiting for free GPUs ({hold.reason or 'none free yet'})"
    if hold.status.value in ("placed", "warming"):
        since = hold.placed_at or now
        return f"{head}; warming for {_span(now.timestamp() - since.timestamp())}"
    return head


def alloc_line(alloc: Allocation, now: datetime) -> str:
    waited = _span(now.timestamp() - alloc.requested_at.timestamp())
    return f"allocation {alloc.id}: {alloc.status.value} for {waited}; {alloc.reason or ''}"


def wait_for(
    first: T,
    fetch: Callable[[str], T],
    done: Callable[[T], bool],
    line: Callable[[T, datetime], str],
    *,
    kind: str,
    poll_s: float = 1.0,
) -> T:
    """Poll until `done`; a live line on a terminal, a line per change elsewhere."""
    current = first
    last = ""
    live = Live(console=err_console, transient=True, auto_refresh=False)
    try:
        with live if err_console.is_terminal else _Nothing():
            while not done(current):
                text = line(current, datetime.now(UTC))
                if err_console.is_terminal:
                    live.update(Text(text), refresh=True)
                elif text.split(";")[0] != last.split(";")[0]:
                    err_console.print(Text(text), soft_wrap=True)
                last = text
                time.sleep(poll_s)
                current = fetch(current.id)
    except KeyboardInterrupt:
        err_console.print(
            Text(
                f"stopped waiting; {kind} {current.id} is still {current.status.value} "
                f"(jitgpu {kind} show {current.id})"
            )
        )
        raise typer.Exit(130) from None
    return current


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
