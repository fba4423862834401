"""Simulated GPUs: stable identities and faults scripted from a file read at every sample."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from control_plane.node_agent.simulated import FAULTS_ENV, SimulatedBackend, simulated_uuid


def _backend(tmp_path: Path, count: int = 2, **kw: object) -> SimulatedBackend:
    return SimulatedBackend(
        node="sim-1",
        count=count,
        model="A100",
        memory_mb=81920,
        faults_file=tmp_path / "faults.json",
        env={},
        **kw,  # type: ignore[arg-type]
    )


def test_uuids_are_stable_per_node_and_distinct_across_nodes(tmp_path: Path) -> None:
    first = [g.uuid for g in _backend(tmp_path).discover().gpus]
    again = [g.uuid for g in _backend(tmp_path).discover().gpus]
    assert first == again and len(set(first)) == 2
    assert simulated_uuid("sim-2", 0) not in first
    assert all(u.startswith("GPU-") for u in first)


def test_discovery_reports_model_memory_and_indexes(tmp_path: Path) -> None:
    gpus = _backend(tmp_path, count=3).discover().gpus
    assert [(g.index, g.model, g.memory_mb) for g in gpus] == [(i, "A100", 81920) for i in range(3)]


def test_healthy_and_idle_without_faults(tmp_path: Path) -> None:
    samples = _backend(tmp_path).sample()
    assert all(s.healthy and s.memory_used_mb == 0 and s.ecc_uncorrected == 0 for s in samples)


def test_faults_are_read_again_at_every_sample(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    gpu0, gpu1 = (g.uuid for g in backend.gpus)
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps({gpu1: {"healthy": False, "reason": "Xid 79"}}))
    assert [s.healthy for s in backend.sample()] == [True, False]
    assert backend.sample()[1].reason == "Xid 79"
    faults.write_text(json.dumps({"0": {"memory_used_mb": 80000, "utilization_pct": 100}}))
    first, second = backend.sample()
    assert first.healthy and first.memory_used_mb == 80000 and first.utilization_pct == 100
    assert second.healthy  # the fault was lifted
    faults.unlink()
    assert all(s.healthy for s in backend.sample())
    assert gpu0 != gpu1


def test_lost_gpu_and_ecc_errors(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    (tmp_path / "faults.json").write_text(
        json.dumps({"0": {"lost": True}, "1": {"ecc_uncorrected": 2}})
    )
    lost, ecc = backend.sample()
    assert not lost.healthy and "lost" in (lost.reason or "")
    assert lost.memory_used_mb is None
    assert not ecc.healthy and ecc.ecc_uncorrected == 2 and "ECC" in (ecc.reason or "")


def test_star_applies_to_every_gpu(tmp_path: Path) -> None:
    backend = _backend(tmp_path, count=3)
    (tmp_path / "faults.json").write_text(json.dumps({"*": {"temperature_c": 91}}))
    assert [s.temperature_c for s in backend.sample()] == [91, 91, 91]


def test_a_broken_faults_file_is_ignored_with_one_warning(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    backend = _backend(tmp_path)
    (tmp_path / "faults.json").write_text('{"0": {"healthy": fal')
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert all(s.healthy for s in backend.sample())
    assert len([r for r in caplog.records if "faults file" in r.message]) == 1
    (tmp_path / "faults.json").write_text(json.dumps({"0": {"colour": "red"}}))
    assert all(s.healthy for s in backend.sample())
    assert "colour" in caplog.records[-1].message


def test_environment_names_the_faults_file(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"*": {"healthy": False}}))
    backend = SimulatedBackend(
        node="n", count=1, model="A100", memory_mb=1, faults_file=None, env={FAULTS_ENV: str(other)}
    )
    assert backend.faults_file == other
    assert not backend.sample()[0].healthy
