"""Per-user running GPU-second totals in a replay, for a budget controller per tenant."""

from __future__ import annotations


class UserLedger:
    """Busy GPU-seconds of each user's jobs (finished plus running so far) and what reactive
    would idle for them; idle is charged to users by the recorder as holds end."""

    def __init__(self) -> None:
        self.done: dict[str, float] = {}
        self.reactive: dict[str, float] = {}
        self._running: dict[str, dict[int, tuple[float, float, int]]] = {}

    def started(
        self, user: str, seq: int, *, start: float, duration: float, gpus: int, cold_s: float
    ) -> None:
        self._running.setdefault(user, {})[seq] = (start, duration, gpus)
        self.reactive[user] = self.reactive.get(user, 0.0) + gpus * cold_s

    def finished(self, user: str, seq: int) -> None:
        running = self._running.get(user)
        if running is None or seq not in running:
            return
        _, duration, gpus = running.pop(seq)
        self.done[user] = self.done.get(user, 0.0) + duration * gpus

    def busy(self, user: str, now: float) -> float:
        live = sum(
            gpus * min(duration, max(0.0, now - start))
            for start, duration, gpus in self._running.get(user, {}).values()
        )
        return self.done.get(user, 0.0) + live
