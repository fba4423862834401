"""Reports on their way to the control plane: sent side by side, off the agent's loop.

One at a time, a job's two reports held up the loop that starts the next job for their round
trips. Here each target's reports go in order on a sender thread and stop at their first
failure; a target never has two sends in flight; the loop takes the outcomes in when it
likes (`finished`), and `on_done` wakes it when one is ready.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from control_plane.node_agent.client import NotFound, Rejected
from control_plane.node_agent.local import Report

# Sends in flight at once: one per target, as many targets as a node has GPUs, commonly.
SENDERS = 8

Outcome = tuple[Report, Exception | None]


class ReportSenders:
    def __init__(self, send: Callable[[Report], None], on_done: Callable[[], None]) -> None:
        self._send = send
        self._on_done = on_done
        self._pool: ThreadPoolExecutor | None = None
        self._in_flight: dict[str, Future[list[Outcome]]] = {}

    def start(self, reports: list[Report]) -> None:
        """Send these, grouped by target; a target with a send in flight waits its turn."""
        by_target: dict[str, list[Report]] = {}
        for report in reports:
            if report.target not in self._in_flight:
                by_target.setdefault(report.target, []).append(report)
        if by_target and self._pool is None:
            self._pool = ThreadPoolExecutor(SENDERS, thread_name_prefix="report")
        for target, group in by_target.items():
            assert self._pool is not None
            future = self._pool.submit(self._in_order, group)
            self._in_flight[target] = future
            future.add_done_callback(lambda _: self._on_done())

    def wait(self) -> None:
        """Until every send in flight has its answer."""
        for future in list(self._in_flight.values()):
            future.result()

    def finished(self) -> list[Outcome]:
        """The outcomes of the sends that finished, once each."""
        outcomes: list[Outcome] = []
        for target, future in list(self._in_flight.items()):
            if future.done():
                del self._in_flight[target]
                outcomes += future.result()
        return outcomes

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _in_order(self, reports: list[Report]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        for report in reports:
            try:
                self._send(report)
            except (NotFound, Rejected) as exc:
                outcomes.append((report, exc))
            except Exception as exc:  # Unreachable, Refused: the rest of this target waits
                outcomes.append((report, exc))
                break
            else:
                outcomes.append((report, None))
        return outcomes
