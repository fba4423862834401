"""A misread never leaks a GPU: jobs without GPU evidence or CPU jobs claim nothing, a bare
`Submitted batch job N` takes no hold made for another job, a count over the cap is never
sent, and every allocation the agent makes has a lease."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

from control_plane.jobs.registry import hold_lifecycle
from predictors.types import Event, EventKind
from smart_agent.agent import JOB_LEASE_S
from smart_agent.parsers import make_parser
from tests.smart_agent.agent_world import POLICY, USER, World, feed_history

ROOT = Path(__file__).resolve().parents[1] / "data" / "real-inputs"


def _hold(world: World, agent) -> str:  # type: ignore[no-untyped-def]
    feed_history(agent, world.clock)
    report = agent.cycle(trigger="timer")
    assert len(report.holds) == 1, [d.reason for d in report.decisions]
    return report.holds[0]


def test_submitted_batch_job_alone_claims_no_hold(world: World) -> None:
    agent = world.agent(POLICY, allocate_on_miss=True)
    hold_id = _hold(world, agent)
    # The real sbatch output, read by the agent's own parser: six bare job lines.
    parser = make_parser("auto", "sbatch.out", user=USER, tz=UTC)
    lines = (ROOT / "slurm_out/G01_local_sbatch_stdout.txt").read_text().splitlines()
    for line in lines:
        for event in parser.parse(line, source="sbatch.out", now=world.clock()):
            agent.observe(event)
    assert world.client.get_hold(hold_id).status.value != "claimed"
    assert world.client.list_allocations() == []
    # The job's record says later how many GPUs it has: then it claims.
    agent.observe(Event(EventKind.JOB_STARTED, world.clock(), USER, gpus=2, job_id="4"))
    assert world.client.get_hold(hold_id).status.value == "claimed"
    jobs = world.log.query("SELECT job_ref, hold_id FROM jobs WHERE hold_id IS NOT NULL")
    assert [(j["job_ref"], j["hold_id"]) for j in jobs] == [("4", hold_id)]


def test_cpu_jobs_claim_nothing_and_allocate_nothing(world: World) -> None:
    agent = world.agent(POLICY, allocate_on_miss=True)
    hold_id = _hold(world, agent)
    agent.observe(Event(EventKind.JOB_STARTED, world.clock(), USER, gpus=0, job_id="cpu1"))
    assert world.client.get_hold(hold_id).status.value != "claimed"
    assert world.client.list_allocations() == []


def test_a_count_over_the_cap_is_never_sent(world: World) -> None:
    agent = world.agent(POLICY, allocate_on_miss=True, max_job_gpus=4)
    agent.observe(Event(EventKind.JOB_STARTED, world.clock(), USER, gpus=512, job_id="big"))
    assert world.client.list_allocations() == []
    default_cap = world.agent(POLICY, allocate_on_miss=True)
    assert default_cap.max_job_gpus == POLICY.max_gpus_total


def test_allocations_the_agent_makes_have_a_lease(world: World) -> None:
    agent = world.agent(POLICY, allocate_on_miss=True)
    agent.observe(Event(EventKind.JOB_STARTED, world.clock(), USER, gpus=1, job_id="j1"))
    (alloc,) = world.client.list_allocations()
    assert alloc.lease_s == JOB_LEASE_S and alloc.status.value == "allocated"
    # Nothing ever says job j1 ended: its lease runs out and the GPU goes back.
    hold_lifecycle(world.db, world.settings, world.clock.advance(JOB_LEASE_S + 1))
    assert world.client.get_allocation(alloc.id).status.value == "expired"
