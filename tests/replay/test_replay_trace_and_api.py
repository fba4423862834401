"""Trace loading, the policy registry, the forecaster adapter, and run_replay's output."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from control_plane.replay import (
    available_policies,
    format_json,
    format_misses,
    format_table,
    make_policy,
    run_replay,
)
from control_plane.replay.api import replay_jobs
from control_plane.replay.engine import SimConfig
from control_plane.replay.forecast import Demand, register_forecaster, sweep, to_demand
from control_plane.replay.policies import parse_options, split_spec
from control_plane.replay.trace import Job, TraceError, load_trace, shared_trace

SLICE = Path(__file__).resolve().parents[1] / "data" / "helios_venus_slice.csv"
HELIOS = "helios_venus_2020-05-28_20d.csv"
BASELINES = ["reactive", "oracle", "keepalive:600", "static:2", "hybrid-histogram"]


def _helios() -> Path:
    """The shared Helios trace beside the repository, else the slice shipped with the tests."""
    return shared_trace(HELIOS) or SLICE


def test_slice_loads_sorted_with_durations() -> None:
    jobs = load_trace(SLICE)
    assert len(jobs) == 400
    assert [j.seq for j in jobs] == list(range(400))
    assert all(a.submit <= b.submit for a, b in itertools.pairwise(jobs))
    assert jobs[0] == Job(0, "venus-1030", "u19", 120183.0, 4, 21027.0)


def test_trace_errors_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,user,submit_time_s,num_gpus,duration_s\nj1,u,10,x,5\n")
    with pytest.raises(TraceError, match=r"bad.csv:2"):
        load_trace(bad)
    bad.write_text("job_id,user,num_gpus\n")
    with pytest.raises(TraceError, match="missing column"):
        load_trace(bad)
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(tmp_path / "absent.csv")


def test_jobs_without_gpus_are_dropped_and_unfinished_jobs_run_to_the_end(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,user,submit_time_s,start_time_s,end_time_s,num_gpus,gpu_type,status,duration_s\n"
        "a,u1,0,0,100,1,,deleted,\n"
        "b,u2,50,55,,1,,alive_at_trace_end,\n"
        "c,u1,60,,,0,,completed,10\n"
        "d,u3,500,,,2,,completed,30\n"
    )
    jobs = load_trace(trace)
    assert [(j.job_id, j.duration) for j in jobs] == [("a", 100.0), ("b", 480.0), ("d", 30.0)]


def test_spec_parsing_and_errors() -> None:
    assert split_spec("keepalive:600") == ("keepalive", "600")
    assert split_spec(" reactive ") == ("reactive", None)
    assert parse_options("8,active=60", positional=("gpus",), allowed=("active",)) == {
        "gpus": "8",
        "active": "60",
    }
    with pytest.raises(ValueError, match="unknown option"):
        parse_options("speed=3", positional=("gpus",))
    with pytest.raises(ValueError, match=r"unknown policy 'nope'; known: .*keepalive"):
        make_policy("nope")
    with pytest.raises(ValueError, match="not a number"):
        make_policy("keepalive:soon")
    with pytest.raises(ValueError, match="whole number"):
        make_policy("static:1.5")
    assert make_policy("keepalive:90").keepalive_s == 90.0  # type: ignore[attr-defined]
    assert make_policy("keepalive").name == "keepalive"


def test_every_baseline_is_registered() -> None:
    names = available_policies()
    for name in ("reactive", "oracle", "keepalive", "static", "hybrid-histogram"):
        assert names.get(name)


def test_run_replay_on_the_slice_gives_one_result_per_policy() -> None:
    results = run_replay(SLICE, capacity=968, gpus_per_node=8, cold_start_s=120, policies=BASELINES)
    assert [r["policy"] for r in results] == BASELINES
    by = {r["policy"]: r for r in results}
    demand = sum(j.gpus for j in load_trace(SLICE))
    reactive, oracle = by["reactive"], by["oracle"]
    assert reactive["warm_hit_rate"] == 0.0
    assert reactive["p50_time_to_gpu_s"] == 120.0
    # Reactive idle is exactly the cold starts; the oracle only moves them earlier.
    assert reactive["idle_gpu_hours"] == pytest.approx(demand * 120 / 3600, abs=1e-3)
    assert oracle["warm_hit_rate"] > 0.97
    assert oracle["mean_time_to_gpu_s"] < 5
    assert oracle["idle_gpu_hours"] == pytest.approx(reactive["idle_gpu_hours"], rel=0.02)
    for r in results:
        assert r["busy_gpu_hours"] == reactive["busy_gpu_hours"]
        assert r["idle_ratio"] == pytest.approx(r["idle_gpu_hours"] / r["busy_gpu_hours"], 1e-3)
        assert sum(r["misses"].values()) == r["jobs"] - r["warm_hits"]
    assert by["keepalive:600"]["warm_hit_rate"] > 0.3
    parsed = json.loads(format_json(results))
    required = {
        "policy",
        "jobs",
        "mean_time_to_gpu_s",
        "p50_time_to_gpu_s",
        "p95_time_to_gpu_s",
        "warm_hit_rate",
        "busy_gpu_hours",
        "idle_gpu_hours",
        "idle_ratio",
    }
    assert all(required <= set(obj) for obj in parsed)
    table = format_table(results)
    assert table.splitlines()[0].split()[:2] == ["policy", "jobs"]
    assert all(name in table for name in BASELINES)
    assert "still_warming" in format_misses(results)


def test_helios_first_jobs_sanity() -> None:
    # The shared trace where present (its first 1,500 jobs), else the shipped slice.
    jobs = load_trace(_helios())[:1500]
    config = SimConfig(capacity=968, gpus_per_node=8, cold_start_s=120.0)
    reactive, oracle = replay_jobs(jobs, ["reactive", "oracle"], config)
    assert reactive["warm_hits"] == 0
    assert oracle["warm_hit_rate"] > 0.95
    assert oracle["idle_gpu_hours"] == pytest.approx(reactive["idle_gpu_hours"], rel=0.02)


def test_run_replay_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="capacity"):
        run_replay(SLICE, capacity=0)
    with pytest.raises(ValueError, match="cold-start"):
        run_replay(SLICE, capacity=8, cold_start_s=-1)
    with pytest.raises(ValueError, match="unknown policy"):
        run_replay(SLICE, capacity=8, policies=["reactive", "psychic"])


@dataclass(frozen=True)
class _Forecast:
    """Shaped like a predictor's forecast: a window [start_at, end_at] and a confidence."""

    user: str
    gpu_count: int
    start_at: float
    end_at: float
    confidence: float

    @property
    def ttl_s(self) -> float:
        return self.end_at - self.start_at


class _Scripted:
    """After each arrival: the same user comes back with the same GPUs in 29-30 minutes."""

    def __init__(self, confidence: float) -> None:
        self.confidence = confidence
        self.pending: list[_Forecast] = []

    def observe_arrival(self, job: Job, now: float) -> None:
        start = now + 1740
        self.pending.append(_Forecast(job.user, job.gpus, start, start + 30, self.confidence))

    def forecast(self, now: float) -> list[_Forecast]:
        return list(self.pending)  # repeats itself: the adapter must not stack holds


register_forecaster("test-scripted", lambda opts: _Scripted(float(opts.get("c", "0.5"))))


def test_forecaster_adapter_turns_forecasts_into_holds_and_obeys_the_knobs() -> None:
    jobs = [Job(i, f"j{i}", "u", 1800.0 * i, 2, 60) for i in range(6)]
    config = SimConfig(capacity=16, cold_start_s=100)
    specs = sweep("test-scripted", "conf", [0.4, 0.6], extra="c=0.5,ttl=120")
    low, high = replay_jobs(jobs, specs, config)
    assert low["policy"] == "test-scripted:conf=0.4,c=0.5,ttl=120"
    # Each job's forecast: warm from +1740, claimable until +1860 with ttl=120.
    assert low["warm_hits"] == 5 and low["holds_placed"] == 5
    assert low["idle_ready_gpu_hours"] == pytest.approx(5 * 2 * 60 / 3600, abs=1e-3)
    assert high["warm_hits"] == 0 and high["holds_placed"] == 0
    # Without ttl the forecast's own 30 s window ends before the job comes.
    (own,) = replay_jobs(jobs, ["test-scripted:c=0.5"], config)
    assert own["holds_placed"] == 5 and own["warm_hits"] == 0
    assert to_demand({"user": "x", "gpus": 1, "at": 5}) == Demand("x", 1, 5.0)
    with pytest.raises(ValueError, match="has none of"):
        to_demand({"user": "x"})
