"""Predictor policies in the replay: registration, options, holds from forecasts, the split."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from control_plane.replay.api import load_plugins, replay_jobs
from control_plane.replay.engine import SimConfig, Simulator
from control_plane.replay.forecast import ForecastPolicy
from control_plane.replay.policies import available_policies, make_policy
from control_plane.replay.trace import Job, load_trace

REPO = Path(__file__).resolve().parents[2]
SLICE = REPO / "tests" / "data" / "helios_venus_slice.csv"
DAY = 86400.0
PREDICTOR_POLICIES = ("burst", "histogram", "seasonality", "ewma", "ensemble")


def _jobs(rows: Sequence[tuple[str, float, int, float]]) -> list[Job]:
    """(user, submit, gpus, duration) rows -> jobs in arrival order."""
    ordered = sorted(rows, key=lambda r: r[1])
    return [Job(i, f"j{i}", u, s, g, d) for i, (u, s, g, d) in enumerate(ordered)]


def _run(jobs: list[Job], spec: str, cold: float = 120.0, capacity: int = 64) -> dict[str, Any]:
    load_plugins()
    sim = Simulator(jobs, make_policy(spec), SimConfig(capacity, cold_start_s=cold))
    result = sim.run()
    rec = sim.rec
    # The replay's exactness identity holds under every policy.
    idle = rec.warming_gpu_s + rec.ready_idle_gpu_s
    assert rec.busy_gpu_s + idle == pytest.approx(rec.taken_gpu_s, abs=1e-6)
    return result


def _bursty() -> list[Job]:
    """Two users submitting every 5 minutes for 3 hours, each job running 15 minutes (so
    three of a user's jobs overlap: nothing has ended when the next one comes), once a day."""
    rows = []
    for day in range(3):
        for user, offset in (("a", 0.0), ("b", 90.0)):
            start = day * DAY + 9 * 3600 + offset
            rows += [(user, start + 300.0 * i, 1, 1000.0) for i in range(36)]
    return _jobs(rows)


# -- registration and options -------------------------------------------------------------------


def test_every_predictor_policy_is_registered_and_runs_on_the_slice() -> None:
    load_plugins()
    known = available_policies()
    assert set(PREDICTOR_POLICIES) <= set(known)
    assert "cues" not in known  # the traces have no log cues
    # The LLM policy is listed, and built only with a model (tests/predictors runs it).
    assert "llm" in known
    jobs = load_trace(SLICE)
    specs = [
        "burst",
        "burst:price=0.005",
        "burst:price=0.005,jobs=4,reuse=0",
        "histogram:tail=0.8,conf=0.3",
        "seasonality:conf=0.4,bin=1800",
        "ewma:horizon=1200",
        "ensemble:price=0.005",
    ]
    for spec in specs:
        result = _run(jobs, spec, capacity=968)
        assert result["policy"] == spec
        assert result["jobs"] == len(jobs)
        assert sum(result["misses"].values()) == result["jobs"] - result["warm_hits"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("burst:bogus=1", "unknown option 'bogus'"),
        ("burst:price=-1", "'price': must be at least"),
        ("burst:price=cheap", "'price': 'cheap' is not a number"),
        ("burst:size=huge", "'size': 'huge' is not one of"),
        ("burst:size=ending", "size 'ending' needs a price"),
        ("burst:reuse=maybe", "'reuse': 'maybe' is not 0/1"),
        ("burst:jobs=2.5", "'jobs': must be a whole number"),
        ("histogram:head=0.9,tail=0.5", "'tail' must not be below 'head'"),
        ("histogram:tail=2", "'tail': must be at most 1"),
        ("seasonality:bin=7000", "'bin': must divide a day"),
        ("ewma:half_life=5", "'half_life': must be one of"),
        ("ensemble:members=burst+llm", "'members'"),
        ("ensemble:mode=vote", "'mode': 'vote' is not one of"),
        ("llm", "no model configured: give llm:model=NAME"),
        ("llm:model=m,calls_per_hour=1.5", "'calls_per_hour': Input should be a valid integer"),
        ("llm:model=m,key_env=not-a-name", "option 'key_env': String should match pattern"),
        ("llm:model=m,timeout=0", "option 'timeout': Input should be greater than 0"),
        ("llm:model=m,temperature=1", "unknown option 'temperature'"),
    ],
)
def test_bad_options_give_a_clear_error(
    spec: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JITGPU_LLM_MODEL", raising=False)
    load_plugins()
    with pytest.raises(ValueError, match=message) as caught:
        make_policy(spec)
    assert str(caught.value).startswith(f"policy {spec!r}:")


def test_options_reach_the_predictor_and_the_adapter() -> None:
    load_plugins()
    policy = make_policy("burst:price=0.004,jobs=3,size=last,fit=0,conf=0.2,reuse=0,pool=8")
    assert isinstance(policy, ForecastPolicy)
    assert policy.min_confidence == 0.2 and not policy.reuse and policy.topup
    burst = policy.forecaster.predictor  # type: ignore[attr-defined]
    assert (burst.price, burst.max_jobs, burst.size) == (0.004, 3, "last")
    assert not burst.value_fit and not burst.warm_after_finish and burst.pool_weight == 8
    assert burst.window_s == 6 * 3600  # priced: the longest window it may choose
    assert make_policy("burst").forecaster.predictor.window_s == 600  # type: ignore[attr-defined]
    season = make_policy("seasonality")
    assert season.tick_s == 600 and season.min_confidence == 0.3  # type: ignore[attr-defined]


# -- behaviour ----------------------------------------------------------------------------------


def test_burst_forecasts_beat_reactive_and_keepalive_on_a_bursty_trace() -> None:
    jobs = _bursty()
    reactive = _run(jobs, "reactive")
    keepalive = _run(jobs, "keepalive:600")
    burst = _run(jobs, "burst:price=0.01")
    assert reactive["mean_time_to_gpu_s"] == 120.0
    # Keep-alive has nothing to keep until the first jobs end; the forecast warms a GPU for
    # the next job while the current ones still run.
    assert burst["mean_time_to_gpu_s"] < 0.5 * keepalive["mean_time_to_gpu_s"]
    assert burst["warm_hit_rate"] > 0.8
    assert burst["misses"]["in_burst"] < keepalive["misses"]["in_burst"]
    # The price keeps the idle cost bounded: well under one GPU per user held all the time.
    assert burst["idle_gpu_hours"] < 2 * 3 * 24


def test_a_higher_price_buys_less_idle_and_more_wait() -> None:
    jobs = load_trace(SLICE)
    config = SimConfig(968, cold_start_s=120.0)
    cheap, dear = replay_jobs(jobs, ["burst:price=0.002", "burst:price=0.05"], config)
    assert dear["idle_gpu_hours"] < cheap["idle_gpu_hours"]
    assert dear["mean_time_to_gpu_s"] > cheap["mean_time_to_gpu_s"]


def test_reuse_keeps_the_ending_jobs_gpus_instead_of_warming_new_ones() -> None:
    # One user, a job every 400 s, each 100 s long: after each end the next comes in 300 s.
    jobs = _jobs([("a", 400.0 * i, 2, 100.0) for i in range(30)])
    kept = _run(jobs, "burst:price=0.001")
    fresh = _run(jobs, "burst:price=0.001,reuse=0")
    assert kept["warm_hit_rate"] > 0.9 and fresh["warm_hit_rate"] > 0.9
    # Kept GPUs are warm already: the first job's cold start and one hold set aside as it
    # arrived (before any job had ended) are all the warming there is.
    assert kept["idle_warming_gpu_hours"] <= 2 * 2 * 120 / 3600 + 1e-3
    assert fresh["idle_warming_gpu_hours"] > 10 * kept["idle_warming_gpu_hours"]


def test_day_starts_and_miss_seconds_are_reported() -> None:
    jobs = _jobs([("a", 9 * 3600.0, 1, 60.0), ("a", DAY + 9 * 3600.0, 1, 60.0)])
    result = _run(jobs, "reactive")
    assert result["day_start_jobs"] == 1 and result["day_start_warm_hits"] == 0
    assert result["day_start_mean_time_to_gpu_s"] == 120.0
    assert result["miss_time_to_gpu_s"]["first_job"] == 120.0
    assert result["miss_time_to_gpu_s"]["long_gap"] == 120.0


# -- the train/test split of bench/tune.py ------------------------------------------------------


def _bench_module(name: str) -> ModuleType:
    bench = str(REPO / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    return importlib.import_module(name)


def test_the_split_keeps_test_days_out_of_tuning() -> None:
    tune = _bench_module("tune")
    rows = [("u", day * DAY + 3600.0 * h, 1, 600.0) for day in range(20) for h in (9, 15)]
    rows.append(("u", 10 * DAY - 60.0, 1, 7200.0))  # submitted before the boundary, runs past it
    jobs = _jobs(rows)
    train, test = tune.split_jobs(jobs)
    assert all(j.submit < 10 * DAY for j in train) and all(j.submit >= 10 * DAY for j in test)
    assert len(train) + len(test) == len(jobs)
    assert any(j.submit + j.duration > 10 * DAY for j in train)  # belongs to its submit day

    seen: list[Job] = []

    def spy(jobs: Sequence[Job], specs: Sequence[str], config: SimConfig) -> list[dict[str, Any]]:
        seen.extend(jobs)
        return [_fake(spec, i) for i, spec in enumerate(specs)]

    config = SimConfig(64, cold_start_s=120.0)
    chosen, _ = tune.tune(train, config, ["burst", "ewma"], run=spy)
    spec, _ = tune.operating_point(train, config, chosen["burst"][0], run=spy)
    assert seen and max(j.submit for j in seen) < 10 * DAY
    assert {j.job_id for j in seen} <= {j.job_id for j in train}
    assert spec.startswith("burst:price=")


def _fake(spec: str, i: int) -> dict[str, Any]:
    return {
        "policy": spec,
        "mean_time_to_gpu_s": 100.0 - i,
        "idle_gpu_hours": 10.0 * (i + 1),
        "idle_ratio": 0.001 * (i + 1),
    }


# -- the array_size cue at its best, bench/cue_value.py ---------------------------------------


def test_the_derived_cue_is_each_users_whole_clump() -> None:
    cue_value = _bench_module("cue_value")
    rows = [
        ("a", 0.0, 1, 600.0),
        ("b", 10.0, 1, 600.0),  # another user inside a's clump: a clump of its own
        ("a", 100.0, 1, 600.0),
        ("a", 219.0, 1, 600.0),  # 119 s after the previous: still a's first clump
        ("a", 400.0, 1, 600.0),  # 181 s: a new clump
        ("b", 5000.0, 1, 600.0),
    ]
    cued = cue_value.with_clump_sizes(_jobs(rows))
    assert [(j.user, j.array_size) for j in cued] == [
        ("a", 3),
        ("b", 1),
        ("a", 3),
        ("a", 3),
        ("a", 1),
        ("b", 1),
    ]
    assert [(j.job_id, j.submit, j.gpus) for j in cued] == [
        (j.job_id, j.submit, j.gpus) for j in _jobs(rows)
    ]


def test_the_cue_lets_the_session_model_warm_a_sweep_it_has_never_seen() -> None:
    # One user's first sweep: 12 one-GPU jobs a minute apart. Without the cue the session
    # model has no past clump to size it from; with it, the first submit says how many follow.
    cue_value = _bench_module("cue_value")
    jobs = _jobs([("u", 60.0 * i, 1, 3600.0) for i in range(12)])
    plain = _run(jobs, "session")
    cued = _run(cue_value.with_clump_sizes(jobs, gap_s=120.0), "session")
    assert cued["mean_time_to_gpu_s"] < plain["mean_time_to_gpu_s"]
