"""The agent as a daemon: APScheduler cycles every cycle_s, and a policy edit applied inside
a running Runner (a new min_confidence takes effect, a bad edit keeps the old policy, a new
predictor list rebuilds the predictors). Short intervals, bounded waits on conditions."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from smart_agent.config import AgentConfig
from smart_agent.runner import STOP_JOIN_S, Runner
from tests.smart_agent.agent_world import USER, World, feed_history
from tests.support.procs import REPO, wait_for

BASE = {
    "predictors": ["burst"],
    "ensemble": "off",
    "lead_s": 0,
    "hold_ttl_s": 600,
    "max_gpus_per_hold": 4,
    "max_gpus_total": 8,
}


def _edit(path: Path, text: str) -> None:
    # A distinct mtime per edit: the reload looks at (mtime, size), and two edits within
    # the file system's time resolution must still both be seen.
    stamp = path.stat().st_mtime + 10 if path.exists() else 1_000_000.0
    path.write_text(text)
    os.utime(path, (stamp, stamp))


@pytest.fixture
def running(world: World, tmp_path: Path) -> Iterator[Runner]:
    policy = tmp_path / "policy.yaml"
    _edit(policy, yaml.safe_dump({**BASE, "min_confidence": 0.99}))
    config = AgentConfig(
        user=USER,
        server=world.server.url,
        prediction_log=str(tmp_path / "runner.db"),
        cycle_s=1,
        reconcile_s=0.5,
    )
    runner = Runner(config, policy, clock=world.clock, client=world.new_client())
    feed_history(runner.agent, world.clock)
    runner.start()
    try:
        yield runner
    finally:
        runner.stop(cancel_holds=False)


def _rows(runner: Runner, sql: str) -> list[dict]:
    return runner.log.query(sql)


def test_the_scheduler_runs_a_cycle_every_cycle_s(running: Runner) -> None:
    # The cycle's row is written inside the cycle and the counter moves after it returns:
    # wait for both, or a read between the two sees the third row and a count of two.
    wait_for(
        lambda: (
            len(_rows(running, "SELECT id FROM cycles WHERE trigger='timer'")) >= 3
            and running.cycles >= 3
        ),
        timeout=20,
        what="three timer cycles, logged and counted",
    )
    assert running.status()["dropped"] == 0


def test_policy_edits_apply_in_a_running_agent(
    running: Runner, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = tmp_path / "policy.yaml"
    wait_for(
        lambda: _rows(
            running,
            "SELECT id FROM forecasts WHERE decision='rejected' "
            "AND reason LIKE '%below min_confidence 0.99%'",
        ),
        timeout=20,
        what="a forecast refused under min_confidence 0.99",
    )
    assert _rows(running, "SELECT id FROM forecasts WHERE hold_id IS NOT NULL") == []
    predictors = running.agent.predictors

    _edit(policy, yaml.safe_dump({**BASE, "min_confidence": 0.3}))
    wait_for(
        lambda: _rows(running, "SELECT id FROM forecasts WHERE hold_id IS NOT NULL"),
        timeout=20,
        what="a hold once min_confidence is 0.3",
    )
    assert running.agent.policy.min_confidence == 0.3
    assert running.agent.predictors is predictors  # same predictors: their record is kept

    with caplog.at_level(logging.ERROR, logger="jitgpu.agent"):
        _edit(policy, "min_confidence: 7\n")
        wait_for(
            lambda: "policy edit refused" in caplog.text, timeout=20, what="the refusal logged"
        )
    assert "min_confidence" in caplog.text
    assert running.agent.policy.min_confidence == 0.3  # the previous policy stays

    _edit(
        policy,
        yaml.safe_dump(
            {
                **BASE,
                "min_confidence": 0.3,
                "predictors": ["burst", "histogram"],
                "ensemble": "weighted",
            }
        ),
    )
    wait_for(
        lambda: [m.name for m in running.agent.predictors.members] == ["burst", "histogram"],
        timeout=20,
        what="the predictors rebuilt",
    )
    wait_for(
        lambda: _rows(
            running, "SELECT id FROM forecasts WHERE decision='shadow' AND predictor='histogram'"
        ),
        timeout=20,
        what="a cycle with the new predictor",
    )


def test_systemd_waits_for_the_agent_to_cancel_its_holds() -> None:
    """SIGTERM, then the worker's join, then the cancellations: all before systemd's SIGKILL."""
    for unit in sorted((REPO / "configs").glob("*.service")):
        stop = re.search(r"^TimeoutStopSec=(\d+)$", unit.read_text(), re.M)
        assert stop is not None, unit
        assert int(stop.group(1)) >= STOP_JOIN_S + 60, unit
