"""A misread never leaks a GPU: jobs without GPU evidence or CPU jobs claim nothing, a bare
`Submitted batch job N` takes no hold made for another job, a count over the cap is never
sent, and every allocation the agent makes has a lease."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

from control_plane.jobs.registry import hold_lifecycle
from predictors.types import Event, EventKind
from smart_agent.agent import JOB_LEASE_S
from smart_agent.parsers import make_parser
from smart_agent.sources import Sources, SourcesConfig
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


def test_a_count_over_the_cap_is_never_sent(world: World, caplog) -> None:  # type: ignore[no-untyped-def]
    """A configured max_job_gpus wins: 512 read from one row is clamped to it, and said once."""
    agent = world.agent(POLICY, allocate_on_miss=True, max_job_gpus=4)
    with caplog.at_level(logging.WARNING, logger="jitgpu.agent"):
        agent.observe(Event(EventKind.JOB_SUBMITTED, world.clock(), USER, job_id="big"))
        agent.observe(Event(EventKind.JOB_STARTED, world.clock(), USER, gpus=512, job_id="big"))
        agent.observe(Event(EventKind.JOB_STARTED, world.clock(), USER, gpus=512, job_id="big"))
    (alloc,) = world.client.list_allocations()
    assert alloc.gpu_count == 4
    (said,) = [r.getMessage() for r in caplog.records if "clamped" in r.getMessage()]
    assert "asks for 512 GPUs: clamped to 4" in said and "set in the config" in said


def test_the_default_cap_is_the_users_largest_job(world: World, caplog) -> None:  # type: ignore[no-untyped-def]
    """Without max_job_gpus: the largest job of the user's seen so far, never under
    4 (see smart_agent.job_cap), within max_gpus_total; other users' jobs do
    not count."""
    policy = POLICY.model_copy(update={"max_gpus_total": 64})
    agent = world.agent(policy, allocate_on_miss=True)
    assert agent.job_gpu_cap() == (4, "no job history yet: 4")
    small = world.agent(POLICY.model_copy(update={"max_gpus_total": 3}))
    assert small.job_gpu_cap() == (3, "no job history yet: 4")  # within the total
    past = world.clock() - 3600  # history: learnt from, never an arrival

    def seen(user: str, gpus: int, job: str) -> None:
        agent.observe(Event(EventKind.JOB_FINISHED, past, user, gpus=gpus, job_id=job))

    seen(USER, 2, "p1")
    assert agent.job_gpu_cap() == (4, "your jobs so far took fewer: 4")  # 2 is not cut to 1
    seen(USER, 6, "p2")
    seen(USER, 3, "p3")
    seen("bob", 7, "b1")
    assert agent.job_gpu_cap() == (6, "the largest of your jobs seen so far")
    assert world.client.list_allocations() == []
    with caplog.at_level(logging.WARNING, logger="jitgpu.agent"):
        agent.observe(Event(EventKind.JOB_STARTED, world.clock(), USER, gpus=512, job_id="big"))
    (alloc,) = world.client.list_allocations()
    assert alloc.gpu_count == 6  # what this user runs, not 512 nor the policy's 64
    assert "asks for 512 GPUs: clamped to 6, max_job_gpus (the largest" in caplog.text
    # The misread joins what was seen: later jobs are bounded by max_gpus_total only.
    assert agent.job_gpu_cap() == (64, "the largest of your jobs seen so far")


def test_allocations_the_agent_makes_have_a_lease(world: World) -> None:
    agent = world.agent(POLICY, allocate_on_miss=True)
    agent.observe(Event(EventKind.JOB_STARTED, world.clock(), USER, gpus=1, job_id="j1"))
    (alloc,) = world.client.list_allocations()
    assert alloc.lease_s == JOB_LEASE_S and alloc.status.value == "allocated"
    # Nothing ever says job j1 ended: its lease runs out and the GPU goes back.
    hold_lifecycle(world.writer, world.settings, world.clock.advance(JOB_LEASE_S + 1))
    assert world.client.get_allocation(alloc.id).status.value == "expired"


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _row(job: str, state: str, submit: float, start: float | None, end: float | None) -> str:
    """One `sacct -P --format=JobID,JobName,Partition,User,State,Submit,Start,End,Elapsed,
    AllocTRES,ReqTRES,NNodes` row, as in the real sample G04."""
    tres = "billing=1,cpu=1,gres/gpu:a100=2,gres/gpu=2,node=1"
    times = [_iso(submit), _iso(start) if start else "Unknown", _iso(end) if end else "Unknown"]
    return f"{job}|train|gpu|{USER}|{state}|{'|'.join(times)}|00:00:30|{tres}|{tres}|1"


def test_a_rewritten_sacct_file_claims_once_per_new_job_and_releases(
    world: World, tmp_path: Path
) -> None:
    """`sacct -P > jobs.txt` from cron, as the agent meets it: the jobs that finished before
    it started claim nothing; a new job claims the warm hold; its end releases it."""
    agent = world.agent(POLICY, allocate_on_miss=True)
    hold_id = _hold(world, agent)
    now = world.clock()
    header = (ROOT / "sacct/G04_local_sacct_P_times_tres.txt").read_text().splitlines()[0]
    jobs = tmp_path / "jobs.txt"  # not named sacct*: the header says what it is
    old = [_row(str(i), "COMPLETED", now - 7200, now - 7100, now - 3600) for i in range(1, 10)]
    jobs.write_text("\n".join([header, *old]) + "\n")
    config = SourcesConfig.model_validate(
        {"user": USER, "watch": [{"path": str(jobs)}], "timezone": "UTC", "slurm": {"poll": "off"}}
    )
    sources = Sources(config, agent.observe, clock=world.clock, home=tmp_path)
    sources.watcher.start(background=False)  # reads the table whole: a baseline
    assert world.client.list_allocations() == []
    assert world.client.get_hold(hold_id).status.value != "claimed"

    start = world.clock.advance(20)
    new = _row("12", "RUNNING", start - 10, start - 5, None)
    jobs.write_text("\n".join([header, *old, new]) + "\n")  # rewritten in place, longer
    sources.watcher.poll_once(everything=True)
    (alloc,) = world.client.list_allocations()
    assert alloc.hold_id == hold_id and alloc.lease_s == JOB_LEASE_S

    end = world.clock.advance(30)
    done = _row("12", "COMPLETED", start - 10, start - 5, end)
    jobs.write_text("\n".join([header, *old, done]) + "\n")
    sources.watcher.poll_once(everything=True)
    sources.stop()
    assert world.client.get_allocation(alloc.id).status.value == "released"
    claimed = world.log.query("SELECT job_ref FROM jobs WHERE allocation_id IS NOT NULL")
    assert [r["job_ref"] for r in claimed] == ["12"]  # one claim, for the one new job
