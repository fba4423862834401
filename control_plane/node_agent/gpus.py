"""What a GPU backend reports (static facts and live samples) and the interface above it."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class GpuInfo:
    """Static facts about one GPU, read once at discovery."""

    uuid: str
    index: int
    name: str  # the driver's full product name, e.g. "NVIDIA H100 80GB HBM3"
    model: str  # the short name the scheduler matches on, e.g. "H100"
    memory_mb: int | None
    mig_mode: bool | None = None
    pci_bus_id: str | None = None
    # Active NVLink links per peer GPU uuid (or per peer PCI bus id when the peer is unknown).
    nvlink: dict[str, int] | None = None
    # Closest common ancestor with every other GPU: NVLINK, INTERNAL, SINGLE, MULTIPLE,
    # HOSTBRIDGE, NODE or SYSTEM (nvidia-smi topo names PIX, PXB, PHB, NODE, SYS).
    topology: dict[str, str] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GpuSample:
    """One reading of a GPU's health and load; any field the driver lacks is None."""

    uuid: str
    healthy: bool = True
    reason: str | None = None
    memory_used_mb: int | None = None
    utilization_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    ecc_uncorrected: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Discovery:
    """What a backend found: the GPUs and a few facts about the driver."""

    backend: str
    gpus: list[GpuInfo]
    driver: dict[str, str | None] = field(default_factory=dict)


class GpuBackend(Protocol):
    """One adapter per source of GPUs (NVML or simulated); everything above uses only this."""

    kind: str

    def discover(self) -> Discovery: ...

    def sample(self) -> list[GpuSample]: ...

    def close(self) -> None: ...


_UNSAFE = re.compile(r"[^A-Za-z0-9 _.-]+")
_VENDOR_WORDS = {"nvidia", "tesla", "geforce", "quadro"}
# Words after the model proper: memory size, form factor, memory type, variants.
_TAIL_WORD = re.compile(r"^(\d+\s*gb|sxm\d*|pcie|hbm\d*e?|nvl|mig|max-q|\d+gb-?\w*)$", re.I)


def short_model(name: str, aliases: dict[str, str] | None = None) -> str:
    """The scheduler's model name from the driver's product name.

    "NVIDIA H100 80GB HBM3" -> "H100", "NVIDIA A100-SXM4-80GB" -> "A100",
    "NVIDIA GeForce RTX 4090" -> "RTX 4090". An alias from the config wins.
    """
    if aliases and name in aliases:
        return aliases[name]
    # The control plane takes letters, digits, space, "_", "." and "-" only: a driver name
    # with anything else ("(16GB)", a trademark sign) must not stop the node registering.
    cleaned = " ".join(_UNSAFE.sub(" ", name).split())
    words = [w for w in re.split(r"[\s-]+", cleaned) if w]
    while words and words[0].lower() in _VENDOR_WORDS:
        words.pop(0)
    kept: list[str] = []
    for word in words:
        if kept and _TAIL_WORD.match(word):
            break
        kept.append(word)
    short = (" ".join(kept) or cleaned)[:64].strip(" -_.")
    return short or "unknown"
