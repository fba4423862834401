"""Heartbeat telemetry: GPU samples and host load (psutil) as wire models, never out of bounds."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, TypeVar

import psutil
from pydantic import BaseModel, ValidationError

from control_plane.node_agent.gpus import GpuSample
from control_plane.schemas.nodes import GpuTelemetry, HostTelemetry

log = logging.getLogger("jitgpu.node.telemetry")

M = TypeVar("M", bound=BaseModel)
MIB = 1024 * 1024


def _fit(model: type[M], values: dict[str, Any]) -> M:
    """Validate; a value the wire refuses (a driver's odd reading) becomes None, not a 422."""
    values = dict(values)
    for _ in range(len(values) + 1):
        try:
            return model.model_validate(values)
        except ValidationError as exc:
            bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
            if not bad & set(values) or bad & {"uuid"}:
                raise
            for key in bad:
                log.debug("dropping out-of-range telemetry %s=%r", key, values.get(key))
                values[key] = None
    raise AssertionError("unreachable")


def gpu_telemetry(sample: GpuSample) -> GpuTelemetry:
    values = sample.as_dict()
    if values.get("reason"):
        values["reason"] = str(values["reason"])[:256]
    return _fit(GpuTelemetry, values)


class HostProbe:
    """CPU and memory use of the host and free space where the cache folder lives."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        psutil.cpu_percent(interval=None)  # the first call only starts the measurement

    def sample(self) -> HostTelemetry:
        values: dict[str, Any] = {}
        try:
            values["cpu_pct"] = psutil.cpu_percent(interval=None)
            values["memory_pct"] = psutil.virtual_memory().percent
        except (OSError, psutil.Error):
            log.debug("host load unavailable", exc_info=True)
        try:
            values["cache_disk_free_mb"] = psutil.disk_usage(str(self.cache_dir)).free // MIB
        except OSError:
            values["cache_disk_free_mb"] = None
        return _fit(HostTelemetry, values)
