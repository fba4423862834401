"""How long `make demo` takes by its own clock, after install: `python bench/demo_time.py`.

Runs `make demo` (the venv already built, so no install is timed) `--runs` times, one after
another, or `--parallel 2` at once to show two demos side by side keep to their own folders.
Prints each run's wall time and folder, then the median, and the machine.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from machine import REPO, describe

FOLDER = re.compile(r"this run's folder \(logs, prediction log\): (\S+)")


def one_demo() -> tuple[float, str]:
    start = time.monotonic()
    done = subprocess.run(
        ["make", "--no-print-directory", "demo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    took = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"make demo failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr}")
    found = FOLDER.search(done.stdout)
    return took, found.group(1) if found else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=1, help="demos at once per run")
    args = parser.parse_args()
    if not (REPO / ".venv" / ".installed").exists():
        sys.exit("build the venv first (make .venv/.installed): install time is not measured")
    times = []
    for run in range(args.runs):
        with ThreadPoolExecutor(args.parallel) as pool:
            results = list(pool.map(lambda _: one_demo(), range(args.parallel)))
        folders = [folder for _, folder in results]
        if len(set(folders)) != len(folders):
            sys.exit(f"two demos shared a folder: {folders}")
        for took, folder in results:
            print(f"run {run + 1}: {took:.1f}s  {folder}", flush=True)
            times.append(took)
    median = statistics.median(times)
    print(
        f"make demo (after install), {args.parallel} at once: median {median:.1f}s of "
        f"{len(times)} runs, min {min(times):.1f}s, max {max(times):.1f}s"
    )
    print(f"machine: {describe()}")


if __name__ == "__main__":
    main()
