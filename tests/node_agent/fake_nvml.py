"""A stand-in for the NVML library: the real pynvml module with its functions monkeypatched."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

MIB = 1024 * 1024


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    memory_mb: int = 81559
    used_mb: int = 512
    util: int = 7
    temp: int = 41
    power_mw: int = 71_250
    ecc: int = 0
    mig: int = 0
    bus: str = "00000000:18:00.0"
    links: list[str] = field(default_factory=list)  # bus id of the peer on each NVLink link


class FakeNvml:
    """GPUs by index; `fail(fn, index, code)` makes that call raise that NVML error."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.init_calls = 0
        self.shutdown_calls = 0
        self.init_error: int | None = None
        self.failures: dict[tuple[str, int | None], Exception] = {}
        self.topology: dict[frozenset[int], int] = {}

    def fail(self, fn: str, index: int | None, error: int | Exception) -> None:
        self.failures[(fn, index)] = pynvml.NVMLError(error) if isinstance(error, int) else error

    def _check(self, fn: str, handle: int | None = None) -> None:
        error = self.failures.get((fn, handle)) or self.failures.get((fn, None))
        if error is not None:
            raise error

    # --- the library calls the adapter makes --------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.init_calls += 1

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlSystemGetNVMLVersion(self) -> str:
        return "12.550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._check("nvmlDeviceGetHandleByIndex", index)
        return index

    def nvmlDeviceGetIndex(self, h: int) -> int:
        self._check("nvmlDeviceGetIndex", h)
        return h

    def nvmlDeviceGetUUID(self, h: int) -> str:
        self._check("nvmlDeviceGetUUID", h)
        return self.gpus[h].uuid

    def nvmlDeviceGetName(self, h: int) -> bytes:
        self._check("nvmlDeviceGetName", h)
        return self.gpus[h].name.encode()  # old bindings answer bytes

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        self._check("nvmlDeviceGetMemoryInfo", h)
        g = self.gpus[h]
        return SimpleNamespace(total=g.memory_mb * MIB, used=g.used_mb * MIB, free=0)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        self._check("nvmlDeviceGetUtilizationRates", h)
        return SimpleNamespace(gpu=self.gpus[h].util, memory=0)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        self._check("nvmlDeviceGetTemperature", h)
        return self.gpus[h].temp

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._check("nvmlDeviceGetPowerUsage", h)
        return self.gpus[h].power_mw

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        assert kind == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        assert counter == pynvml.NVML_VOLATILE_ECC
        self._check("nvmlDeviceGetTotalEccErrors", h)
        return self.gpus[h].ecc

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        self._check("nvmlDeviceGetMigMode", h)
        return [self.gpus[h].mig, self.gpus[h].mig]

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        self._check("nvmlDeviceGetPciInfo", h)
        return SimpleNamespace(busId=self.gpus[h].bus.lower().encode())

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        self._check("nvmlDeviceGetNvLinkState", h)
        if link >= len(self.gpus[h].links):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> Any:
        return SimpleNamespace(busId=self.gpus[h].links[link])

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        self._check("nvmlDeviceGetTopologyCommonAncestor", a)
        return self.topology.get(frozenset({a, b}), pynvml.NVML_TOPOLOGY_SYSTEM)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
        for name in dir(self):
            if name.startswith("nvml"):
                monkeypatch.setattr(pynvml, name, getattr(self, name))
        return self


def two_gpus() -> FakeNvml:
    a = FakeGpu(uuid="GPU-aaaa", bus="00000000:18:00.0", links=["00000000:2A:00.0"] * 2)
    b = FakeGpu(uuid="GPU-bbbb", bus="00000000:2A:00.0", links=["00000000:18:00.0"] * 2)
    return FakeNvml([a, b])
