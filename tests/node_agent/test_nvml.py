"""The NVML adapter against a faked library: discovery, unsupported fields, lost GPUs, ECC."""

from __future__ import annotations

import json
import logging
import re

import pynvml
import pytest

from control_plane.node_agent import discover
from control_plane.node_agent.config import load_config
from control_plane.node_agent.gpus import short_model
from control_plane.node_agent.nvml import LOST_REASON, NvmlBackend, NvmlUnavailable
from control_plane.node_agent.simulated import SimulatedBackend
from control_plane.node_agent.telemetry import gpu_telemetry
from control_plane.schemas.common import GPU_MODEL_PATTERN
from tests.node_agent.fake_nvml import FakeGpu, FakeNvml, two_gpus


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    return two_gpus().install(monkeypatch)


def test_nothing_touches_the_driver_until_first_use(nvml: FakeNvml) -> None:
    backend = NvmlBackend()
    assert nvml.init_calls == 0
    backend.sample()  # discovers first
    backend.sample()
    assert nvml.init_calls == 1
    backend.close()
    assert nvml.shutdown_calls == 1


def test_discovery_reads_identity_memory_mig_and_topology(nvml: FakeNvml) -> None:
    nvml.gpus[1].mig = 1
    found = NvmlBackend().discover()
    assert found.backend == "nvml"
    assert found.driver == {
        "driver_version": "550.54.15",
        "nvml_version": "12.550.54.15",
        "cuda_driver_version": "12.4",
    }
    a, b = found.gpus
    assert (a.uuid, a.index, a.name, a.model) == ("GPU-aaaa", 0, "NVIDIA H100 80GB HBM3", "H100")
    assert a.memory_mb == 81559
    assert (a.mig_mode, b.mig_mode) == (False, True)
    assert a.pci_bus_id == "00000000:18:00.0"
    # NVLink peers are named by uuid once both ends are known.
    assert a.nvlink == {"GPU-bbbb": 2} and b.nvlink == {"GPU-aaaa": 2}
    assert a.topology == {"GPU-bbbb": "NVLINK"}


def test_pcie_gpus_report_the_common_ancestor_and_no_nvlink(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fake = FakeNvml([FakeGpu(uuid="GPU-1"), FakeGpu(uuid="GPU-2", bus="00000000:3B:00.0")])
    fake.topology[frozenset({0, 1})] = pynvml.NVML_TOPOLOGY_HOSTBRIDGE
    fake.install(monkeypatch)
    a, b = NvmlBackend().discover().gpus
    assert a.nvlink is None
    assert a.topology == {"GPU-2": "HOSTBRIDGE"} and b.topology == {"GPU-1": "HOSTBRIDGE"}


def test_sample_converts_units(nvml: FakeNvml) -> None:
    first = NvmlBackend().sample()[0]
    assert first.healthy and first.reason is None
    assert first.memory_used_mb == 512
    assert first.utilization_pct == 7.0
    assert first.temperature_c == 41.0
    assert first.power_w == pytest.approx(71.25)
    assert first.ecc_uncorrected == 0


def test_not_supported_fields_become_none_and_heartbeat_still_builds(nvml: FakeNvml) -> None:
    for fn in (
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetPciInfo",
    ):
        nvml.fail(fn, 0, pynvml.NVML_ERROR_NOT_SUPPORTED)
    backend = NvmlBackend()
    gpu = backend.discover().gpus[0]
    assert gpu.mig_mode is None and gpu.pci_bus_id is None
    sample = backend.sample()[0]
    assert sample.healthy
    assert (sample.power_w, sample.utilization_pct, sample.ecc_uncorrected) == (None, None, None)
    assert sample.temperature_c is None and sample.memory_used_mb == 512
    wire = gpu_telemetry(sample)
    assert wire.uuid == "GPU-aaaa" and wire.power_w is None


def test_lost_gpu_is_unhealthy_and_the_others_are_not(nvml: FakeNvml) -> None:
    backend = NvmlBackend()
    backend.discover()
    nvml.fail("nvmlDeviceGetUtilizationRates", 1, pynvml.NVML_ERROR_GPU_IS_LOST)
    a, b = backend.sample()
    assert a.healthy
    assert not b.healthy and b.reason == LOST_REASON
    assert b.memory_used_mb is None


def test_gpu_lost_during_discovery_is_registered_then_reported_unhealthy(nvml: FakeNvml) -> None:
    nvml.fail("nvmlDeviceGetName", 1, pynvml.NVML_ERROR_GPU_IS_LOST)
    nvml.fail("nvmlDeviceGetMemoryInfo", 1, pynvml.NVML_ERROR_GPU_IS_LOST)
    backend = NvmlBackend()
    gpus = backend.discover().gpus
    assert [g.uuid for g in gpus] == ["GPU-aaaa", "GPU-bbbb"]
    assert gpus[1].name == "unknown" and gpus[1].memory_mb is None
    assert not backend.sample()[1].healthy


def test_uncorrectable_ecc_errors_make_a_gpu_unhealthy(nvml: FakeNvml) -> None:
    nvml.gpus[0].ecc = 3
    sample = NvmlBackend().sample()[0]
    assert not sample.healthy
    assert sample.ecc_uncorrected == 3 and "3 uncorrectable ECC" in (sample.reason or "")


def test_unexpected_binding_error_is_unknown_not_fatal(nvml: FakeNvml, caplog) -> None:  # type: ignore[no-untyped-def]
    nvml.fail("nvmlDeviceGetPowerUsage", None, AttributeError("no such symbol"))
    backend = NvmlBackend()
    with caplog.at_level(logging.WARNING):
        samples = [backend.sample() for _ in range(3)]
    assert all(s[0].power_w is None and s[0].healthy for s in samples)
    # Said once, not at every heartbeat.
    assert sum("nvmlDeviceGetPowerUsage" in r.message for r in caplog.records) == 1


def test_gpu_without_readable_uuid_is_skipped(nvml: FakeNvml) -> None:
    nvml.fail("nvmlDeviceGetUUID", 0, pynvml.NVML_ERROR_UNKNOWN)
    assert [g.uuid for g in NvmlBackend().discover().gpus] == ["GPU-bbbb"]


def test_no_library_means_unavailable(nvml: FakeNvml) -> None:
    nvml.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    with pytest.raises(NvmlUnavailable, match="Library Not Found"):
        NvmlBackend().discover()


def test_auto_backend_falls_back_to_simulated_gpus(nvml: FakeNvml) -> None:
    nvml.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    cfg = load_config(overrides={"simulated": {"count": 3, "model": "L4"}}, env={})
    backend = discover.open_backend(cfg, "n1")
    assert isinstance(backend, SimulatedBackend)
    assert [g.model for g in backend.discover().gpus] == ["L4"] * 3
    strict = load_config(overrides={"backend": "nvml"}, env={})
    with pytest.raises(NvmlUnavailable):
        discover.open_backend(strict, "n1")


def test_auto_backend_uses_nvml_when_the_driver_answers(nvml: FakeNvml) -> None:
    cfg = load_config(overrides={"model_aliases": {"NVIDIA H100 80GB HBM3": "H100-SXM"}}, env={})
    backend = discover.open_backend(cfg, "n1")
    assert backend.kind == "nvml"
    assert {g.model for g in backend.discover().gpus} == {"H100-SXM"}


def test_discover_prints_json(nvml: FakeNvml, capsys) -> None:  # type: ignore[no-untyped-def]
    assert discover.main(["--samples", "2", "--interval", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "nvml"
    assert [g["uuid"] for g in out["gpus"]] == ["GPU-aaaa", "GPU-bbbb"]
    assert len(out["samples"]) == 2 and out["samples"][0][0]["temperature_c"] == 41.0


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA H200 NVL", "H200"),
        ("NVIDIA RTX A6000", "RTX A6000"),
        # Whatever the driver says, the name is one the control plane accepts.
        ("NVIDIA GeForce RTX 4060 Ti (16GB)", "RTX 4060 Ti"),
        ("NVIDIA Tesla\u00ae T4", "T4"),
        ("NVIDIA \u00a9", "NVIDIA"),
    ],
)
def test_short_model_names(name: str, short: str) -> None:
    assert short_model(name) == short
    assert re.fullmatch(GPU_MODEL_PATTERN, short)
