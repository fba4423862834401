"""The lease of an allocation the agent made is renewed while the job is seen alive, and
only then: a job gone silent, or ended, gives its GPUs back when the lease runs out."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from control_plane.jobs.registry import hold_lifecycle
from predictors.types import Event, EventKind
from smart_agent.config import AgentConfig
from smart_agent.runner import RECONCILE, Runner, _Tick
from tests.smart_agent.agent_world import POLICY, USER, World

LEASE = 600


def _status(world: World, alloc_id: str) -> str:
    return world.client.get_allocation(alloc_id).status.value


def _expire(world: World) -> None:
    hold_lifecycle(world.writer, world.settings, world.clock())


def test_a_job_seen_alive_keeps_its_gpus_past_the_first_lease(world: World) -> None:
    agent = world.agent(POLICY, allocate_on_miss=True, lease_s=LEASE)
    agent.observe(Event(EventKind.JOB_STARTED, world.clock(), USER, gpus=1, job_id="41"))
    agent.observe(Event(EventKind.JOB_STARTED, world.clock(), USER, gpus=2, job_id="42"))
    by_gpus = {a.gpu_count: a.id for a in world.client.list_allocations()}
    alive, silent = by_gpus[1], by_gpus[2]
    for _ in range(4):  # 4 x 400 s: well past the first lease's end at 600 s
        world.clock.advance(200)
        agent.seen_alive(["41"])  # the Slurm poll still lists job 41, not 42
        world.clock.advance(200)
        agent.reconcile()
        _expire(world)
        assert _status(world, alive) == "allocated"
    # Job 42 was never seen again: its lease was not renewed and ended by itself.
    assert _status(world, silent) == "expired"
    assert world.client.get_allocation(alive).expires_at is not None
    agent.observe(
        Event(EventKind.JOB_FINISHED, world.clock(), USER, gpus=1, job_id="41", duration_s=1600)
    )
    assert _status(world, alive) == "released"
    # Once ended, nothing is renewed any more, whatever a late poll says.
    agent.seen_alive(["41"])
    world.clock.advance(LEASE)
    assert agent.renew_leases() == 0


def test_renewal_waits_for_half_the_lease_and_for_a_sign_of_life(world: World) -> None:
    agent = world.agent(POLICY, allocate_on_miss=True, lease_s=LEASE)
    agent.observe(Event(EventKind.JOB_SUBMITTED, world.clock(), USER, gpus=1, job_id="7"))
    (alloc,) = world.client.list_allocations()
    first_end = world.client.get_allocation(alloc.id).expires_at
    world.clock.advance(100)
    # Its start is a sign of life, but a renewal this early would only cost a request.
    agent.observe(Event(EventKind.JOB_STARTED, world.clock(), USER, gpus=1, job_id="7"))
    assert agent.renew_leases() == 0
    world.clock.advance(LEASE / 2)
    assert agent.renew_leases() == 1
    renewed = world.client.get_allocation(alloc.id)
    assert renewed.expires_at is not None and first_end is not None
    assert (renewed.expires_at - first_end).total_seconds() == 100 + LEASE / 2
    world.clock.advance(LEASE / 2)
    assert agent.renew_leases() == 0  # not seen since the renewal


def test_an_allocation_gone_from_the_server_is_not_renewed_again(world: World) -> None:
    agent = world.agent(POLICY, allocate_on_miss=True, lease_s=LEASE)
    agent.observe(Event(EventKind.JOB_STARTED, world.clock(), USER, gpus=1, job_id="9"))
    (alloc,) = world.client.list_allocations()
    world.client.release(alloc.id)  # someone released it by hand
    world.clock.advance(LEASE / 2)
    agent.seen_alive(["9"])
    assert agent.renew_leases() == 0  # 409 from the server: forgotten, not retried
    world.clock.advance(LEASE / 2)
    agent.seen_alive(["9"])
    assert agent.renew_leases() == 0
    assert _status(world, alloc.id) == "released"


HEADER = "JobIDRaw|JobID|User|JobName|Partition|State|Submit|Start|End|ElapsedRaw|AllocTRES|ReqTRES"


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def test_the_slurm_poll_listing_a_job_renews_its_lease_in_the_running_agent(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `sacct` on PATH prints what the test wrote: the Slurm source polls it as it would the
    # real one, and its reports reach the agent through the runner's queue.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacct").write_text(f'#!/bin/sh\ncat "{tmp_path}/sacct.out"\n')
    (bin_dir / "sacct").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump({"predictors": ["burst"]}))
    config = AgentConfig(
        user=USER,
        server=world.server.url,
        prediction_log=str(tmp_path / "runner.db"),
        allocate_on_miss=True,
        lease_s=LEASE,
        timezone="UTC",
        slurm={"poll": "on"},
    )
    runner = Runner(config, tmp_path / "policy.yaml", clock=world.clock, client=world.new_client())
    try:
        slurm = runner.sources.slurm
        assert slurm is not None

        def poll(*rows: str) -> None:
            (tmp_path / "sacct.out").write_text("\n".join([HEADER, *rows]) + "\n")
            slurm.poll_once()
            while not runner._queue.empty():
                runner._handle(runner._queue.get_nowait())
            runner._handle(_Tick(RECONCILE))

        poll()  # the baseline
        start = _iso(world.clock.advance(2))
        running = f"55|55|{USER}|train|gpu|RUNNING|{start}|{start}|Unknown|0|gres/gpu=1|"
        poll(running)
        (alloc,) = world.client.list_allocations()
        assert alloc.gpu_count == 1 and alloc.lease_s == LEASE
        for _ in range(3):  # 3 x 300 s: past the first lease's end
            world.clock.advance(LEASE / 2)
            poll(running)
            _expire(world)
            assert _status(world, alloc.id) == "allocated"
        end = _iso(world.clock.advance(10))
        poll(running.replace("RUNNING", "COMPLETED").replace("Unknown", end))
        assert _status(world, alloc.id) == "released"
    finally:  # never started: its threads are not running, only what it opened is closed
        runner.client.close()
        runner.log.close()
