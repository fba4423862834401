"""The one NVML adapter (nvidia-ml-py): discovers GPUs and samples their health, field by field."""

from __future__ import annotations

import logging
from typing import Any

from control_plane.node_agent.gpus import Discovery, GpuInfo, GpuSample, short_model

log = logging.getLogger("jitgpu.node.nvml")

MIB = 1024 * 1024
# nvmlDeviceGetTopologyCommonAncestor levels, named as in NVML's enum.
TOPOLOGY_LEVELS = {
    0: "INTERNAL",
    10: "SINGLE",
    20: "MULTIPLE",
    30: "HOSTBRIDGE",
    40: "NODE",
    50: "SYSTEM",
}
LOST_REASON = "GPU is lost (fell off the bus): it needs a reset or a reboot"


class NvmlUnavailable(RuntimeError):
    """No NVIDIA library or driver here (or it refused to start)."""


class _GpuLost(Exception):
    pass


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


class NvmlBackend:
    """GPUs as NVML sees them. Nothing touches the driver until `discover()` or `sample()`."""

    kind = "nvml"

    def __init__(self, module: Any | None = None, *, model_aliases: dict[str, str] | None = None):
        self._module = module
        self._aliases = model_aliases or {}
        self._initialised = False
        self._gpus: list[tuple[GpuInfo, Any]] = []
        self._discovered = False
        self._failed_fields: set[str] = set()

    @property
    def nvml(self) -> Any:
        if self._module is None:
            # Imported here, on first use, so that an agent with simulated GPUs never loads it.
            import pynvml

            self._module = pynvml
        return self._module

    def _init(self) -> None:
        if self._initialised:
            return
        nv = self.nvml
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise NvmlUnavailable(f"NVML did not start: {exc}") from exc
        self._initialised = True

    def _read(self, fn_name: str, *args: Any, lost_ok: bool = False) -> Any:
        """One field. Unsupported (or any other failure) -> None; a lost GPU raises _GpuLost."""
        nv = self.nvml
        fn = getattr(nv, fn_name, None)
        if fn is None:
            return None  # an older binding without this call
        try:
            return fn(*args)
        except nv.NVMLError_GpuIsLost as exc:
            if lost_ok:
                return None
            raise _GpuLost(str(exc)) from exc
        except nv.NVMLError:
            return None
        except Exception as exc:  # a binding quirk must never stop a heartbeat
            if fn_name not in self._failed_fields:
                self._failed_fields.add(fn_name)
                log.warning(
                    "NVML %s failed unexpectedly (%r); reporting it as unknown", fn_name, exc
                )
            return None

    def discover(self) -> Discovery:
        self._init()
        nv = self.nvml
        try:
            count = int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as exc:
            raise NvmlUnavailable(f"NVML cannot count GPUs: {exc}") from exc
        found: list[tuple[dict[str, Any], Any]] = []
        for index in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nv.nvmlDeviceGetUUID(handle))
            except nv.NVMLError as exc:
                log.warning("GPU %d skipped: its handle or UUID cannot be read (%s)", index, exc)
                continue
            if not uuid:
                continue
            found.append((self._static(handle, index, uuid), handle))
        self._link_topology(found)
        self._gpus = [(GpuInfo(**fields), handle) for fields, handle in found]
        self._discovered = True
        return Discovery(backend=self.kind, gpus=[g for g, _ in self._gpus], driver=self._driver())

    def _driver(self) -> dict[str, str | None]:
        cuda = self._read("nvmlSystemGetCudaDriverVersion")
        return {
            "driver_version": _text(self._read("nvmlSystemGetDriverVersion")),
            "nvml_version": _text(self._read("nvmlSystemGetNVMLVersion")),
            "cuda_driver_version": None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
        }

    def _static(self, handle: Any, index: int, uuid: str) -> dict[str, Any]:
        name = _text(self._read("nvmlDeviceGetName", handle, lost_ok=True)) or "unknown"
        memory = self._read("nvmlDeviceGetMemoryInfo", handle, lost_ok=True)
        mig = self._read("nvmlDeviceGetMigMode", handle, lost_ok=True)
        pci = self._read("nvmlDeviceGetPciInfo", handle, lost_ok=True)
        nv_index = self._read("nvmlDeviceGetIndex", handle, lost_ok=True)
        return {
            "uuid": uuid,
            "index": index if nv_index is None else int(nv_index),
            "name": name,
            "model": short_model(name, self._aliases),
            "memory_mb": None if memory is None else int(memory.total) // MIB,
            "mig_mode": None if not mig else bool(mig[0]),
            "pci_bus_id": _bus_id(pci),
            "nvlink": self._nvlinks(handle),
        }

    def _nvlinks(self, handle: Any) -> dict[str, int] | None:
        """Active links per remote PCI bus id; None when the GPU has no NVLink at all."""
        nv = self.nvml
        enabled = getattr(nv, "NVML_FEATURE_ENABLED", 1)
        peers: dict[str, int] = {}
        supported = False
        for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
            state = self._read("nvmlDeviceGetNvLinkState", handle, link, lost_ok=True)
            if state is None:
                break  # links are numbered from 0: the first missing one ends the list
            supported = True
            if state != enabled:
                continue
            remote = _bus_id(
                self._read("nvmlDeviceGetNvLinkRemotePciInfo", handle, link, lost_ok=True)
            )
            key = remote or "unknown"
            peers[key] = peers.get(key, 0) + 1
        return peers if supported else None

    def _link_topology(self, found: list[tuple[dict[str, Any], Any]]) -> None:
        """Name NVLink peers by uuid and record each GPU pair's closest common ancestor."""
        by_bus = {f["pci_bus_id"]: f["uuid"] for f, _ in found if f["pci_bus_id"]}
        for fields, _ in found:
            if fields["nvlink"]:
                fields["nvlink"] = {by_bus.get(k, k): n for k, n in fields["nvlink"].items()}
            fields["topology"] = {} if len(found) > 1 else None
        for i, (a, ha) in enumerate(found):
            for b, hb in found[i + 1 :]:
                if (a["nvlink"] or {}).get(b["uuid"]):
                    level = "NVLINK"
                else:
                    raw = self._read("nvmlDeviceGetTopologyCommonAncestor", ha, hb, lost_ok=True)
                    if raw is None:
                        continue
                    level = TOPOLOGY_LEVELS.get(int(raw), str(raw))
                a["topology"][b["uuid"]] = level
                b["topology"][a["uuid"]] = level

    def sample(self) -> list[GpuSample]:
        if not self._discovered:
            self.discover()
        return [self._sample_one(info, handle) for info, handle in self._gpus]

    def _sample_one(self, info: GpuInfo, handle: Any) -> GpuSample:
        nv = self.nvml
        try:
            memory = self._read("nvmlDeviceGetMemoryInfo", handle)
            util = self._read("nvmlDeviceGetUtilizationRates", handle)
            temp = self._read("nvmlDeviceGetTemperature", handle, nv.NVML_TEMPERATURE_GPU)
            power_mw = self._read("nvmlDeviceGetPowerUsage", handle)
            ecc = self._read(
                "nvmlDeviceGetTotalEccErrors",
                handle,
                nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                nv.NVML_VOLATILE_ECC,
            )
        except _GpuLost:
            return GpuSample(uuid=info.uuid, healthy=False, reason=LOST_REASON)
        ecc_count = None if ecc is None else int(ecc)
        healthy, reason = True, None
        if ecc_count:
            healthy = False
            reason = f"{ecc_count} uncorrectable ECC error(s) since the driver loaded"
        return GpuSample(
            uuid=info.uuid,
            healthy=healthy,
            reason=reason,
            memory_used_mb=None if memory is None else int(memory.used) // MIB,
            utilization_pct=None if util is None else float(util.gpu),
            temperature_c=None if temp is None else float(temp),
            power_w=None if power_mw is None else power_mw / 1000.0,
            ecc_uncorrected=ecc_count,
        )

    def close(self) -> None:
        if self._initialised:
            self._initialised = False
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # shutting down: nothing left to protect
                log.debug("nvmlShutdown failed", exc_info=True)


def _bus_id(pci: Any) -> str | None:
    if pci is None:
        return None
    value = _text(getattr(pci, "busId", None))
    return value.upper() if value else None
