"""The group-commit writer's own cost per allocate+release, in process (no HTTP, no threads).

    .venv/bin/python bench/writer_cost.py [--batch 8] [--pairs 2000] [--runs 5]

16 nodes x 8 GPUs and one tenant on a fresh SQLite file (WAL, synchronous=NORMAL). Each
round hands the writer a batch of `--batch` allocation commands (1 GPU each), then a batch
releasing them, through `GroupWriter.apply_batch` as the writer thread does. Prints the
process CPU time per allocate+release pair (median of the runs): the writer's ceiling is
one pair per that much of a core.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient
from machine import describe

from control_plane.api.app import create_app
from control_plane.config import ServerSettings
from control_plane.schemas.allocations import AllocationCreate
from control_plane.services import allocations
from control_plane.services.writer import Command, GroupWriter

ADMIN = "bench-admin-token-0123456789"


def one_run(args: argparse.Namespace, tmp: Path, n: int) -> float:
    url = f"sqlite:///{tmp / f'writer{n}.db'}"
    settings = ServerSettings(database_url=url, admin_token=ADMIN, run_jobs=False)
    app = create_app(settings)
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with TestClient(app) as http:
        for node in range(16):
            gpus = [
                {"uuid": f"GPU-{node}-{i}", "model": "A100", "memory_mb": 1, "index": i}
                for i in range(8)
            ]
            body = {"name": f"n{node}", "gpus": gpus}
            http.post("/v1/nodes", json=body, headers=headers).raise_for_status()
        made = http.post("/v1/tenants", json={"name": "b", "quota_gpus": 128}, headers=headers)
        tenant_id = made.json()["id"]
        writer: GroupWriter = app.state.writer
        body = AllocationCreate(gpu_count=1, use_holds=False)

        def allocate(session, now):  # type: ignore[no-untyped-def]
            return allocations.create(session, tenant_id=tenant_id, body=body, now=now)

        def release(alloc_id: str):  # type: ignore[no-untyped-def]
            return lambda session, now: (
                200,
                allocations.release(session, tenant_id=tenant_id, allocation_id=alloc_id, now=now),
            )

        def round_trip() -> None:
            made = [Command(use_case=allocate) for _ in range(args.batch)]
            writer.apply_batch(made)
            ids = [json.loads(c.answer.result()[1])["id"] for c in made]
            freed = [Command(use_case=release(i)) for i in ids]
            writer.apply_batch(freed)
            for c in freed:
                c.answer.result()

        for _ in range(20):  # warm: the placement view, statement caches
            round_trip()
        rounds = args.pairs // args.batch
        started = time.process_time()
        for _ in range(rounds):
            round_trip()
        return (time.process_time() - started) / (rounds * args.batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jitgpu-writer-") as tmp:
        costs = [one_run(args, Path(tmp), n) for n in range(args.runs)]
    print(f"machine: {describe()}")
    print(
        f"writer CPU per allocate+release, batches of {args.batch}: "
        f"{1e6 * statistics.median(costs):.0f} us (median of {args.runs}; "
        f"runs {', '.join(f'{1e6 * c:.0f}' for c in costs)})"
    )


if __name__ == "__main__":
    main()
