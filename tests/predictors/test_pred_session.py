"""Session model: clumps, their size and in-clump rate, the cadence detector, agent cues."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from predictors.session import SessionModel, detect_cadence


@dataclass(frozen=True)
class _Job:
    user: str
    gpus: int
    array_size: int | None = None


def _feed(model: SessionModel, times: list[float], gpus: int = 1, user: str = "u") -> None:
    for t in times:
        model.observe_arrival(_Job(user, gpus), t)


def test_cadence_needs_most_gaps_near_their_median() -> None:
    assert detect_cadence([600.0, 600.0, 601.0, 599.0]) is not None
    cadence = detect_cadence([600.0, 600.0, 900.0, 600.0, 600.0])
    assert cadence is not None and cadence.period_s == 600.0 and cadence.share == 0.8
    assert detect_cadence([100.0, 600.0, 2000.0, 50.0]) is None
    assert detect_cadence([600.0, 600.0]) is None  # too few to tell


def test_clumps_are_split_at_the_gap_and_sized() -> None:
    model = SessionModel(clump_gap_s=120.0, lead_s=100.0)
    # Three clumps of four jobs, 10 s apart inside, starting every 600 s exactly.
    _feed(model, [600.0 * c + 10.0 * i for c in range(3) for i in range(4)])
    s = model.users["u"]
    assert list(s.sizes) == [4, 4] and s.jobs == 4
    assert list(s.spans) == [30.0, 30.0] and s.rate() == pytest.approx(0.1)
    assert s.expected_size() == 4


def test_inside_a_clump_it_warms_the_jobs_due_within_a_warm_up() -> None:
    model = SessionModel(clump_gap_s=120.0, lead_s=20.0)
    _feed(model, [600.0 * c + 10.0 * i for c in range(3) for i in range(4)])
    model.forecast(1300.0)
    model.observe_arrival(_Job("u", 2), 1800.0)  # the fourth clump starts
    demands = model.forecast(1800.0)
    # Rate 0.1 jobs/s x 20 s warm-up = 2 jobs ahead, of the three still to come.
    assert [(d.gpus, d.at) for d in demands] == [(2, 1800.0), (2, 1800.0)]
    assert all(d.reason.startswith("clump") and d.ttl_s == 140.0 for d in demands)
    assert model.forecast(1800.0) == []  # nothing new for anybody


def test_after_a_clump_a_periodic_user_gets_the_next_clump_warm() -> None:
    model = SessionModel(clump_gap_s=120.0, lead_s=20.0)
    _feed(model, [600.0 * c + 10.0 * i for c in range(4) for i in range(4)])
    demands = model.forecast(1830.0)  # the fourth clump is complete
    assert {d.at for d in demands} == {2400.0}
    assert len(demands) == 2 and demands[0].reason == "cadence: a clump every 600s"
    assert demands[0].confidence == 1.0


def test_an_array_size_cue_at_the_first_submit_sizes_the_clump() -> None:
    model = SessionModel(clump_gap_s=120.0, lead_s=100.0)
    model.observe_arrival(_Job("u", 1, array_size=50), 0.0)
    demands = model.forecast(0.0)
    # No history of rate: one job ahead, but a confident one since the agent saw the array.
    assert len(demands) == 1 and demands[0].confidence == 0.9
    s = model.users["u"]
    assert s.expected_size() == 50
    # Without the cue and without history nothing is expected beyond the job itself.
    model.observe_arrival(_Job("v", 1), 0.0)
    assert model.user_forecast("v", 0.0) == []


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        SessionModel(clump_gap_s=0)


def test_the_replay_carries_an_array_size_cue_column_to_the_session_policy(tmp_path) -> None:
    from control_plane.replay.api import run_replay
    from control_plane.replay.trace import TraceError, load_trace

    header = "job_id,user,submit_time_s,start_time_s,end_time_s,num_gpus,gpu_type,status,duration_s"
    rows = [f"{i},u,{1000 + 30 * i},,,1,,,5000" for i in range(6)]
    plain = tmp_path / "plain.csv"
    plain.write_text("\n".join([header, *rows]) + "\n")
    cued = tmp_path / "cued.csv"
    cued.write_text("\n".join([header + ",array_size", *(r + ",6" for r in rows)]) + "\n")
    assert [j.array_size for j in load_trace(cued)] == [6] * 6
    assert load_trace(plain)[0].array_size is None
    # The first submit tells the sweep's size: its next jobs warm as it comes.
    with_cue = run_replay(cued, 64, cold_start_s=100, policies=["session"])[0]
    without = run_replay(plain, 64, cold_start_s=100, policies=["session"])[0]
    assert with_cue["mean_time_to_gpu_s"] < without["mean_time_to_gpu_s"] == 100.0
    bad = tmp_path / "bad.csv"
    bad.write_text(header + ",array_size\n1,u,0,,,1,,,5,0\n")
    with pytest.raises(TraceError, match="array_size must be at least 1"):
        load_trace(bad)
