"""The default policy's warm reserve in the replay, and `Control.keep`, which it stands on."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from control_plane.replay.api import load_plugins
from control_plane.replay.budget_policy import BudgetedPolicy
from control_plane.replay.engine import SimConfig, Simulator
from control_plane.replay.policies import Control, Policy, make_policy
from control_plane.replay.trace import Job

COLD = 100.0


def _jobs(*rows: tuple[str, float, int, float]) -> list[Job]:
    ordered = sorted(rows, key=lambda r: r[1])
    return [Job(i, f"j{i}", u, s, g, d) for i, (u, s, g, d) in enumerate(ordered)]


def _run(jobs: list[Job], policy: Policy | str, capacity: int = 64) -> dict[str, object]:
    load_plugins()
    built = make_policy(policy) if isinstance(policy, str) else policy
    return Simulator(jobs, built, SimConfig(capacity, gpus_per_node=8, cold_start_s=COLD)).run()


class _KeepSome(Policy):
    """Two holds for user a (2 GPUs until 500 s, 3 GPUs until 1000 s), then keep 3 GPUs of
    them until 2000 s: only the one that lasts longest needs to be extended."""

    def begin(self, jobs: Sequence[Job], ctl: Control) -> None:
        ctl.hold("a", 2, 200.0, 300.0)
        ctl.hold("a", 3, 200.0, 800.0)
        ctl.keep("a", 3, 2000.0)


def test_keep_extends_the_longest_lived_holds_up_to_the_gpus_asked() -> None:
    # A 3-GPU job at 1500 s, when both holds would have expired (another user's job at 0 s
    # starts the replay early enough for the holds to be placed).
    result = _run(_jobs(("b", 0.0, 1, 60.0), ("a", 1500.0, 3, 60.0)), _KeepSome())
    assert result["warm_hits"] == 1
    assert result["hold_gpus_claimed"] == 3
    assert result["hold_gpus_expired"] == 2


def _clumps(n: int = 100) -> list[Job]:
    # Three 1-GPU jobs in the same second every 300 s, each running 1000 s: the previous
    # clumps still run when the next comes, so no ending job's GPUs can be kept for it.
    return _jobs(*[("a", 300.0 * k, 1, 1000.0) for k in range(n) for _ in range(3)])


def test_the_warm_reserve_serves_clumps_the_forecast_alone_misses() -> None:
    spec = "default:price=0.1,period=1e12"  # a fixed price: the structure alone differs
    alone = _run(_clumps(), spec)
    both = _run(_clumps(), spec + ",reserve=1")
    assert both["warm_hits"] > alone["warm_hits"]  # type: ignore[operator]
    assert both["mean_time_to_gpu_s"] < alone["mean_time_to_gpu_s"]  # type: ignore[operator]
    assert both["misses"]["still_warming"] < alone["misses"]["still_warming"]  # type: ignore[index]


def test_the_reserve_is_asked_for_and_follows_the_budget_price() -> None:
    load_plugins()
    off = make_policy("default:budget=0.05")
    assert isinstance(off, BudgetedPolicy) and off.reserve is None
    policy = make_policy("default:budget=0.05,reserve=1")
    assert isinstance(policy, BudgetedPolicy) and policy.reserve is not None
    _run(_clumps(40), policy)
    reserve = policy.reserve
    assert reserve.lead_s == COLD  # the warm-up follows the replay's cold start
    assert reserve.price == policy.budget.price


def test_a_bad_reserve_option_is_refused() -> None:
    load_plugins()
    with pytest.raises(ValueError, match="option 'reserve'"):
        make_policy("default:reserve=maybe")
