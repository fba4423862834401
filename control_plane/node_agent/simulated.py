"""Simulated GPUs behind the same interface as NVML, with faults scripted from a JSON file."""

from __future__ import annotations

import json
import logging
import os
import uuid as uuidlib
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from control_plane.node_agent.gpus import Discovery, GpuInfo, GpuSample

log = logging.getLogger("jitgpu.node.simulated")

V = TypeVar("V", int, float)
FAULTS_ENV = "JITGPU_SIM_FAULTS"
_NAMESPACE = uuidlib.UUID("6f1d3c52-8a0e-4b7a-9d55-3c1f0e2b7a11")


class Fault(BaseModel):
    """What to pretend about one GPU; each field left out keeps its normal value."""

    model_config = ConfigDict(extra="forbid")

    healthy: bool | None = None
    reason: str | None = Field(default=None, max_length=256)
    lost: bool = False
    memory_used_mb: int | None = Field(default=None, ge=0)
    utilization_pct: float | None = Field(default=None, ge=0, le=100)
    temperature_c: float | None = None
    power_w: float | None = Field(default=None, ge=0)
    ecc_uncorrected: int | None = Field(default=None, ge=0)


class Faults(BaseModel):
    """The faults file: GPU selector (uuid, index as a string, or "*") -> fault."""

    model_config = ConfigDict(extra="forbid")

    gpus: dict[str, Fault]


def simulated_uuid(node: str, index: int) -> str:
    """Stable across restarts, so re-registering never duplicates a GPU; unique per node."""
    return f"GPU-{uuidlib.uuid5(_NAMESPACE, f'{node}/{index}')}"


class SimulatedBackend:
    """`count` GPUs of one model on node `node`, idle and healthy unless a fault says otherwise.

    The faults file (config `simulated.faults_file`, or the JITGPU_SIM_FAULTS variable) is read
    again at every sample, so a test or a demo can change a GPU's health from outside.
    """

    kind = "simulated"

    def __init__(
        self,
        *,
        node: str,
        count: int,
        model: str,
        memory_mb: int,
        faults_file: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        environ = os.environ if env is None else env
        self.node = node
        self.model = model
        self.memory_mb = memory_mb
        from_env = environ.get(FAULTS_ENV)
        self.faults_file = Path(from_env) if from_env else faults_file
        self.gpus = [
            GpuInfo(
                uuid=simulated_uuid(node, i),
                index=i,
                name=f"Simulated {model}",
                model=model,
                memory_mb=memory_mb,
                mig_mode=False,
                pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
                nvlink=None,
                topology={simulated_uuid(node, j): "NODE" for j in range(count) if j != i} or None,
            )
            for i in range(count)
        ]
        self._last_problem: str | None = None

    def discover(self) -> Discovery:
        return Discovery(
            backend=self.kind,
            gpus=list(self.gpus),
            driver={"driver_version": None, "nvml_version": None, "cuda_driver_version": None},
        )

    def _faults(self) -> dict[str, Fault]:
        if self.faults_file is None:
            return {}
        try:
            raw = self.faults_file.read_text()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            return self._problem(f"cannot read faults file {self.faults_file}: {exc.strerror}")
        try:
            faults = Faults.model_validate({"gpus": json.loads(raw) if raw.strip() else {}})
        except (ValueError, ValidationError) as exc:
            # A half-written file is normal while a test rewrites it: warn once, keep going.
            return self._problem(f"faults file {self.faults_file} ignored: {exc}")
        self._last_problem = None
        return faults.gpus

    def _problem(self, message: str) -> dict[str, Fault]:
        if message != self._last_problem:
            self._last_problem = message
            log.warning("%s", message)
        return {}

    def sample(self) -> list[GpuSample]:
        faults = self._faults()
        return [self._sample_one(info, faults) for info in self.gpus]

    def _sample_one(self, info: GpuInfo, faults: dict[str, Fault]) -> GpuSample:
        fault = faults.get(info.uuid) or faults.get(str(info.index)) or faults.get("*")
        if fault is None:
            return _idle(info.uuid)
        if fault.lost:
            return GpuSample(
                uuid=info.uuid,
                healthy=False,
                reason=fault.reason or "GPU is lost (simulated)",
            )
        base = _idle(info.uuid)
        ecc = fault.ecc_uncorrected if fault.ecc_uncorrected is not None else base.ecc_uncorrected
        healthy = fault.healthy if fault.healthy is not None else not ecc
        reason = None
        if not healthy:
            reason = fault.reason or (
                f"{ecc} uncorrectable ECC error(s) (simulated)" if ecc else "unhealthy (simulated)"
            )
        return GpuSample(
            uuid=info.uuid,
            healthy=healthy,
            reason=reason,
            memory_used_mb=_pick(fault.memory_used_mb, base.memory_used_mb),
            utilization_pct=_pick(fault.utilization_pct, base.utilization_pct),
            temperature_c=_pick(fault.temperature_c, base.temperature_c),
            power_w=_pick(fault.power_w, base.power_w),
            ecc_uncorrected=ecc,
        )

    def close(self) -> None:
        return None


def _pick(value: V | None, default: V | None) -> V | None:
    return default if value is None else value


def _idle(uuid: str) -> GpuSample:
    return GpuSample(
        uuid=uuid,
        memory_used_mb=0,
        utilization_pct=0.0,
        temperature_c=34.0,
        power_w=62.0,
        ecc_uncorrected=0,
    )
