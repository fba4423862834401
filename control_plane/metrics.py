"""Prometheus metrics of the cluster, read from the database at scrape time, so that every
replica reports the same cluster-wide figures; plus in-process placement latency."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import text

from control_plane.schemas.enums import AllocationStatus, HoldStatus, NodeStatus

TTG_BUCKETS = (0.0, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)

# Registered into each app's registry; module-level so that services can observe into it.
placement_seconds = Histogram(
    "jitgpu_placement_seconds",
    "Time of one placement decision in the scheduling core.",
    buckets=(0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05),
    registry=None,
)


class ClusterCollector(Collector):
    def __init__(self, db: object) -> None:
        self.db = db

    def collect(self) -> Iterator[Metric]:
        with self.db.read() as session:  # type: ignore[attr-defined]

            def rows(sql: str) -> list:
                return list(session.execute(text(sql)).all())

            yield _by_state(
                "jitgpu_holds",
                "Holds by state (ended states are outcomes).",
                rows("SELECT status, COUNT(*) FROM hold GROUP BY status"),
                [s.value for s in HoldStatus],
            )
            allocs = rows("SELECT status, COUNT(*) FROM allocation GROUP BY status")
            yield _by_state(
                "jitgpu_allocations",
                "Allocations by state.",
                allocs,
                [s.value for s in AllocationStatus],
            )
            pending = dict(allocs).get(AllocationStatus.PENDING.value, 0)
            yield GaugeMetricFamily(
                "jitgpu_queue_depth", "Allocations waiting for GPUs.", value=pending
            )
            yield _by_state(
                "jitgpu_nodes",
                "Nodes by state.",
                rows("SELECT status, COUNT(*) FROM node GROUP BY status"),
                [s.value for s in NodeStatus],
            )
            yield _by_state(
                "jitgpu_gpus",
                "GPUs by state.",
                rows(_GPU_STATES),
                ["free", "held", "allocated", "unhealthy", "offline"],
            )
            yield _time_to_gpu(rows(_TTG))
            warm, total = rows(
                "SELECT COALESCE(SUM(CASE WHEN warm THEN 1 ELSE 0 END), 0), "
                "COUNT(*) FROM allocation WHERE allocated_at IS NOT NULL"
            )[0]
            yield GaugeMetricFamily(
                "jitgpu_warm_hit_ratio",
                "Share of allocations that started on warm GPUs.",
                value=(warm / total) if total else 0.0,
            )
            idle = rows("SELECT COALESCE(SUM(idle_gpu_s), 0) FROM hold")[0][0]
            yield CounterMetricFamily(
                "jitgpu_idle_gpu_hours",
                "GPU-hours held by holds while no job used them.",
                value=float(idle) / 3600.0,
            )


def _by_state(name: str, doc: str, rows: list, states: list[str]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["state"])
    counts = {state: count for state, count in rows}
    for state in states:
        family.add_metric([state], counts.get(state, 0))
    return family


_GPU_STATES = """
SELECT CASE
    WHEN n.status <> 'online' THEN 'offline'
    WHEN NOT g.healthy THEN 'unhealthy'
    WHEN a.allocation_id IS NOT NULL THEN 'allocated'
    WHEN a.hold_id IS NOT NULL THEN 'held'
    ELSE 'free' END AS state, COUNT(*)
FROM gpu g JOIN node n ON n.id = g.node_id
LEFT JOIN assignment a ON a.gpu_uuid = g.uuid AND a.ended_at IS NULL
WHERE g.present
GROUP BY state
"""

_TTG = (
    "SELECT COUNT(*), COALESCE(SUM(ready_at - requested_at), 0), "
    + ", ".join(
        f"COALESCE(SUM(CASE WHEN ready_at - requested_at <= {b} THEN 1 ELSE 0 END), 0)"
        for b in TTG_BUCKETS
    )
    # Measured ones only (as the API reports them): a cold assignment without a warm-up
    # is not a time-to-GPU of 0.
    + " FROM allocation WHERE ready_at IS NOT NULL AND (warm OR ready_at <> allocated_at)"
)


def _time_to_gpu(rows: list) -> HistogramMetricFamily:
    count, total, *cumulative = rows[0]
    buckets = [(str(b), float(c)) for b, c in zip(TTG_BUCKETS, cumulative, strict=True)]
    buckets.append(("+Inf", float(count)))
    return HistogramMetricFamily(
        "jitgpu_time_to_gpu_seconds",
        "Seconds from request to usable (warm) GPUs.",
        buckets=buckets,
        sum_value=float(total),
    )
