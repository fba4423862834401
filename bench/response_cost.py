"""CPU cost of answering the two hot routes, old way against lean way, in process (no HTTP).

    .venv/bin/python bench/response_cost.py

POST /v1/allocations: the old answer hashed the body always, dumped the model to a dict,
and rendered it with json.dumps (JSONResponse); the lean one hashes only with an
Idempotency-Key and renders once with pydantic's serializer. DELETE: the old answer let
FastAPI re-validate the returned model in the thread pool and serialise it; the lean one
returns pydantic's JSON as the response. Prints microseconds per answer (median of 5 runs),
measured as process CPU time, so that other work on the machine moves it little.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute, serialize_response
from machine import describe

from control_plane.api.respond import json_text
from control_plane.api.routers import allocations
from control_plane.schemas.allocations import Allocation, AllocationCreate, AssignedGpu
from control_plane.services.idempotency import request_hash

N = 3000


def sample() -> tuple[AllocationCreate, Allocation]:
    body = AllocationCreate(gpu_count=1, use_holds=False)
    now = datetime(2026, 11, 27, tzinfo=UTC)
    alloc = Allocation.model_validate(
        {
            "id": "alloc_0123456789abcdef",
            "tenant_id": "tenant_0123456789abcdef",
            "status": "allocated",
            "gpu_count": 1,
            "gpu_model": None,
            "lease_s": None,
            "gpus": [
                AssignedGpu(uuid="GPU-n1-0", node="n1", node_id="node_0123456789abcdef", index=0)
            ],
            "requested_at": now,
            "allocated_at": now,
            "ready_at": now,
            "released_at": None,
            "expires_at": None,
            "time_to_gpu_s": 0.0,
            "warm": False,
            "strategy": "consolidated",
            "job_class": "batch",
            "label": None,
            "hold_id": None,
            "preempted_holds": [],
            "reason": None,
            "warmup": None,
            "command": None,
            "task_status": None,
            "exit_code": None,
            "output_tail": None,
        }
    )
    return body, alloc


def cpu_us(fn: Callable[[], object]) -> float:
    runs = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(N):
            fn()
        runs.append((time.process_time() - start) / N * 1e6)
    return statistics.median(runs)


def main() -> None:
    body, alloc = sample()
    delete = next(
        r
        for r in allocations.router.routes
        if isinstance(r, APIRoute)
        and r.path == "/v1/allocations/{allocation_id}"
        and "DELETE" in r.methods
    )
    loop = asyncio.new_event_loop()

    def post_old() -> object:
        request_hash("POST", "/v1/allocations", body)
        return JSONResponse(alloc.model_dump(mode="json"), status_code=201)

    def post_lean() -> object:
        return json_text(alloc.model_dump_json(), 201)

    def delete_old() -> object:
        # What FastAPI does with a model returned by a sync route: validate it again in the
        # thread pool, then serialise it.
        content = loop.run_until_complete(
            serialize_response(
                field=delete.response_field,
                response_content=alloc,
                is_coroutine=False,
                dump_json=True,
            )
        )
        return json_text(content.decode())

    def delete_lean() -> object:
        return json_text(alloc.model_dump_json())

    figures = {
        name: cpu_us(fn)
        for name, fn in [
            ("post_old", post_old),
            ("post_lean", post_lean),
            ("delete_old", delete_old),
            ("delete_lean", delete_lean),
        ]
    }
    loop.close()
    print(f"machine: {describe()}")
    print(
        f"POST answer: {figures['post_old']:.1f} us -> {figures['post_lean']:.1f} us of CPU; "
        f"DELETE answer: {figures['delete_old']:.1f} us -> {figures['delete_lean']:.1f} us "
        f"(median of 5 x {N})"
    )


if __name__ == "__main__":
    main()
