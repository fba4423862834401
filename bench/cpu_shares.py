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


def _postgres_seconds() -> float:
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    total += _process_seconds(int(entry.name))
            except OSError:
                continue  # gone in between
    return total


def _machine_busy_seconds() -> float:
    cpu = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in cpu[:8])
    return (user + nice + system + irq + softirq + steal) / _TICK


def snapshot(named: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named process (by pid), of PostgreSQL's processes, and of
    the machine. PostgreSQL backends that exit in between take their seconds with them: the
    servers keep theirs open."""
    found = {name: _process_seconds(pid) for name, pid in named.items()}
    found["postgres"] = _postgres_seconds()
    found["machine"] = _machine_busy_seconds()
    return found


def used(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """Cores used on average over the window, per entry, and `rest` = machine - the others."""
    cores = {k: (after[k] - before[k]) / seconds for k in before}
    cores["rest"] = cores["machine"] - sum(v for k, v in cores.items() if k != "machine")
    return {k: round(v, 2) for k, v in cores.items()}
