"""What a benchmark ran on: cores, CPU model, memory, Python, date (printed with every figure)."""

from __future__ import annotations

import datetime
import os
import platform
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def describe() -> str:
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return (
        f"{os.cpu_count()} cores ({cpu_model()}){mem}, Python {platform.python_version()}, "
        f"{datetime.date.today().isoformat()}"
    )
