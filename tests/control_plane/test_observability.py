"""Request ids, JSON logs and the Prometheus metrics (both databases)."""

from __future__ import annotations

import json
import logging

from control_plane.logs import JsonFormatter, request_id
from tests.control_plane.conftest import ADMIN, Api


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


def test_request_id_is_echoed_or_made(api: Api) -> None:
    r = api.http.get("/healthz", headers={"X-Request-ID": "trace-7"})
    assert r.headers["x-request-id"] == "trace-7"
    made = api.http.get("/healthz").headers["x-request-id"]
    assert len(made) == 16 and made != api.http.get("/healthz").headers["x-request-id"]


def test_metrics_count_the_cluster(api: Api) -> None:
    api.node("n1", gpus=4)
    _, headers = api.tenant(quota=4)
    api.http.post("/v1/holds", json={"gpu_count": 1, "ttl_s": 60}, headers=headers)
    alloc = api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=headers).json()
    api.http.post("/v1/allocations", json={"gpu_count": 2, "use_holds": False}, headers=headers)
    text = api.http.get("/metrics").text
    assert _metric(text, 'jitgpu_gpus{state="allocated"}') == 3.0
    assert _metric(text, 'jitgpu_gpus{state="free"}') == 1.0
    assert _metric(text, 'jitgpu_holds{state="claimed"}') == 1.0
    # Only the warm claim was measured; the cold assignment is not a time-to-GPU of 0.
    assert _metric(text, "jitgpu_time_to_gpu_seconds_count") == 1.0
    assert _metric(text, "jitgpu_warm_hit_ratio") == 0.5
    assert alloc["warm"] is True
    assert "jitgpu_request_seconds_bucket" in text and "jitgpu_placement_seconds_count" in text


def test_metrics_show_the_queue(api: Api) -> None:
    api.node("n1", gpus=1)
    _, headers = api.tenant(quota=4)
    for _ in range(3):
        api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=headers)
    assert _metric(api.http.get("/metrics").text, "jitgpu_queue_depth") == 2.0
    assert api.http.get("/v1/nodes", headers=ADMIN).status_code == 200


def test_json_log_lines_carry_the_request_id() -> None:
    record = logging.LogRecord("jitgpu.access", logging.INFO, __file__, 1, "GET %s", ("/x",), None)
    record.status = 200
    token = request_id.set("rid-1")
    try:
        line = json.loads(JsonFormatter().format(record))
    finally:
        request_id.reset(token)
    assert line["msg"] == "GET /x" and line["request_id"] == "rid-1" and line["status"] == 200
    assert line["level"] == "info" and line["ts"].endswith("Z")
