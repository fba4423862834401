"""Where a benchmark window's CPU went: seconds used by named processes, PostgreSQL's, and
the whole machine's (the rest is the load generators' and everything else's), from /proc."""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _process_seconds(pid: int) -> float:
    """User plus system time of a process (all its threads); 0 once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / _TICK


def _postgres_seconds() -> dict[int, float]:
    """Seconds so far of each PostgreSQL process, by pid."""
    found: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    found[int(entry.name)] = _process_seconds(int(entry.name))
            except OSError:
                continue  # gone in between
    return found


def _machine_busy_seconds() -> float:
    cpu = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in cpu[:8])
    return (user + nice + system + irq + softirq + steal) / _TICK


Snapshot = dict[str, float | dict[int, float]]


def snapshot(named: dict[str, int]) -> Snapshot:
    """CPU seconds so far of each named process (by pid), of each PostgreSQL process, and of
    the machine."""
    found: Snapshot = {name: _process_seconds(pid) for name, pid in named.items()}
    found["postgres"] = _postgres_seconds()
    found["machine"] = _machine_busy_seconds()
    return found


def _delta(before: float | dict[int, float], after: float | dict[int, float]) -> float:
    if isinstance(before, dict) and isinstance(after, dict):
        # Per process, over those alive at the end: a backend that exits in the window takes
        # its seconds with it (subtracting its earlier total made the sum negative), and one
        # that starts in it counts from zero. The servers keep their backends open.
        return sum(s - before.get(pid, 0.0) for pid, s in after.items())
    assert isinstance(before, float) and isinstance(after, float)
    return after - before


def used(before: Snapshot, after: Snapshot, seconds: float) -> dict[str, float]:
    """Cores used on average over the window, per entry, and `rest` = machine - the others."""
    cores = {k: _delta(before[k], after[k]) / seconds for k in before}
    cores["rest"] = cores["machine"] - sum(v for k, v in cores.items() if k != "machine")
    return {k: round(v, 2) for k, v in cores.items()}
