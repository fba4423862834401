"""The smart agent against a live Slurm: a real slurmctld/slurmd, the control plane and a
simulated node as processes, the agent polling Slurm itself: squeue where the cluster has no
accounting (sacct fails and the Slurm source falls back), sacct where slurmdbd runs.
Researcher jobs submitted with `sbatch --gres=gpu:N` are seen arriving and ending with their
GPU counts, each gets one allocation of that many GPUs, a CPU job gets none, and nothing the
agent allocated stays allocated once the jobs have ended. So too for a job that fails
(exit 1), a job array (each task a job with its GPU) and a job that Slurm ends at its time
limit (TIMEOUT)."""

from __future__ import annotations

import getpass
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import ADMIN_TOKEN
from tests.support.nodes import enrol_token
from tests.support.procs import JITGPU, Proc, ServerProc, wait_for
from tests.support.slurm_cluster import SlurmCluster, start_agent_on, start_or_skip

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[dict]:
    # `accounting` (slurmdbd, so that sacct answers) when a test asks for it with `sacct`.
    mode = getattr(request, "param", "squeue")
    cluster = start_or_skip(gpus_per_node=4, accounting=mode == "sacct")
    procs: list[Proc] = []
    try:
        server = ServerProc(
            tmp_path, admin_token=ADMIN_TOKEN, env={"JITGPU_JOBS_INTERVAL_S": "1"}
        ).start()
        procs.append(server)
        server.wait_ready()
        with server.admin() as admin:
            tenant = admin.post("/v1/tenants", json={"name": "alice", "quota_gpus": 4}).json()
            key = admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
            enrol = enrol_token(admin, "sim-1", {})
        node_yaml = tmp_path / "node.yaml"
        node_yaml.write_text(
            yaml.safe_dump({"heartbeat_interval_s": 0.5, "cache_dir": str(tmp_path / "cache")})
        )
        procs.append(
            Proc(
                [*JITGPU, "node", "--server", server.url, "--name", "sim-1",
                 "--simulated-gpus", "4", "--config", str(node_yaml)],
                log=tmp_path / "node.log",
                env={"JITGPU_ENROL_TOKEN": enrol},
            ).start()
        )  # fmt: skip
        with server.admin() as admin:
            wait_for(lambda: len(admin.get("/v1/gpus").json()) == 4, timeout=30, what="GPUs")
        yield {
            "slurm": cluster,
            "server": server,
            "key": key,
            "tmp": tmp_path,
            "procs": procs,
            "mode": mode,
        }
    finally:
        for proc in reversed(procs):
            proc.stop()
        cluster.stop()


def _start_agent(world: dict) -> Proc:
    tmp: Path = world["tmp"]
    (tmp / "policy.yaml").write_text(
        yaml.safe_dump({"predictors": ["cues"], "ensemble": "off", "max_gpus_per_hold": 4})
    )
    (tmp / "agent.yaml").write_text(
        yaml.safe_dump(
            {
                "user": getpass.getuser(),  # whose jobs `squeue --me` lists
                "server": world["server"].url,
                "policy": "policy.yaml",
                "prediction_log": str(tmp / "predictions.db"),
                "cycle_s": 3600,
                "reconcile_s": 1,
                "allocate_on_miss": True,
                "watch": [],
                "slurm": {"poll": "on", "interval_s": 5},
            }
        )
    )
    return start_agent_on(
        world["slurm"], tmp / "agent.yaml", key=world["key"], mode=world["mode"],
        procs=world["procs"],
    )  # fmt: skip


def _allocations(http: httpx.Client) -> list[dict]:
    return http.get("/v1/allocations").json()


def _wait_allocations(http: httpx.Client, agent: Proc, count: int) -> list[dict]:
    return wait_for(
        lambda: (lambda a: a if len(a) == count else None)(_allocations(http)),
        timeout=20,
        what=f"an allocation per GPU job\n{agent.output()[-3000:]}",
    )


def _wait_queue_empty(cluster: SlurmCluster, timeout: float) -> None:
    wait_for(
        lambda: not cluster.run("squeue", "-h", "-o", "%i").stdout.split(),
        timeout=timeout,
        what=f"the jobs to end\n{cluster.run('squeue', '-t', 'all').stdout}",
    )


def _wait_released(http: httpx.Client, agent: Proc) -> list[dict]:
    return wait_for(
        lambda: (lambda a: a if all(x["status"] != "allocated" for x in a) else None)(
            _allocations(http)
        ),
        timeout=15,
        what=f"the allocations released\n{agent.output()[-3000:]}",
    )


def _assert_no_gpu_assigned(world: dict) -> None:
    with world["server"].admin() as admin:
        assert all(g["assigned_to"] is None for g in admin.get("/v1/gpus").json())


def _agent_jobs(world: dict) -> list[tuple]:
    """The agent's own record: (job_ref, gpus, allocation_id, ended_at) per job seen."""
    db = sqlite3.connect(world["tmp"] / "predictions.db")
    try:
        return db.execute("SELECT job_ref, gpus, allocation_id, ended_at FROM jobs").fetchall()
    finally:
        db.close()


@pytest.mark.parametrize("world", ["squeue", "sacct"], indirect=True)
def test_agent_follows_live_slurm_jobs_and_leaves_nothing_allocated(world: dict) -> None:
    cluster: SlurmCluster = world["slurm"]
    began = time.monotonic()
    agent = _start_agent(world)
    headers = {"Authorization": f"Bearer {world['key']}"}
    with httpx.Client(base_url=world["server"].url, headers=headers, timeout=10) as http:
        time.sleep(1)  # the agent's first poll is its baseline: jobs come after it
        jobs = {
            # Long enough to be seen running: slurmctld hands sacct its records a few
            # seconds late, and the agent polls every 5 s.
            cluster.sbatch("--gres=gpu:1", "--wrap=sleep 14"): 1,
            cluster.sbatch("--gres=gpu:2", "--wrap=sleep 16"): 2,
            cluster.sbatch("--wrap=sleep 3"): 0,  # a CPU job: no GPU for it
        }

        arrived = _wait_allocations(http, agent, 2)
        assert sorted(a["gpu_count"] for a in arrived) == [1, 2]
        assert all(a["status"] == "allocated" and a["lease_s"] for a in arrived)
        _wait_queue_empty(cluster, 30)
        ended = _wait_released(http, agent)
    # Released by the agent on seeing each job end, not expired by the lease.
    assert sorted((a["gpu_count"], a["status"]) for a in ended) == [
        (1, "released"),
        (2, "released"),
    ]
    _assert_no_gpu_assigned(world)
    # The agent's own record: each job's arrival with its GPU count, and its end.
    rows = _agent_jobs(world)
    assert {r[0]: r[1] for r in rows} == jobs
    assert all(r[3] is not None for r in rows if r[1])  # every GPU job seen to end
    assert [r[0] for r in rows if r[2] is not None] == [j for j, n in jobs.items() if n]
    assert time.monotonic() - began < 60


@pytest.mark.parametrize("world", ["squeue", "sacct"], indirect=True)
def test_agent_sees_a_failure_an_array_and_a_time_out_end_and_releases_them(
    world: dict,
) -> None:
    cluster: SlurmCluster = world["slurm"]
    began = time.monotonic()
    agent = _start_agent(world)
    headers = {"Authorization": f"Bearer {world['key']}"}
    with httpx.Client(base_url=world["server"].url, headers=headers, timeout=10) as http:
        time.sleep(1)  # after the agent's baseline poll
        # First, so that it runs on the node that is up (two jobs fit there, the rest wait
        # for the cloud node to boot).
        late = cluster.sbatch("--gres=gpu:1", "--time=5", "--wrap=sleep 300")
        failed = cluster.sbatch("--gres=gpu:1", "--wrap=sleep 4; exit 1")
        array = cluster.sbatch("--array=0-1", "--gres=gpu:1", "--wrap=sleep 6")
        wait_for(
            lambda: cluster.job_field(late, "JobState") == "RUNNING",
            timeout=20,
            what="the time-limited job to run",
        )
        # Slurm's smallest time limit is a minute; moving the end time to now leaves the
        # ending to slurmctld's own time-limit check (every 30 s): a genuine TIMEOUT.
        cluster.scontrol("update", f"JobId={late}", "EndTime=now")
        arrived = _wait_allocations(http, agent, 4)
        assert sorted(a["gpu_count"] for a in arrived) == [1, 1, 1, 1]
        _wait_queue_empty(cluster, 45)
        ended = _wait_released(http, agent)
        ids = cluster.run("squeue", "--me", "-t", "all", "-h", "-o", "%A %i").stdout
    states = {job: cluster.job_field(job, "JobState") for job in (failed, late)}
    assert states == {failed: "FAILED", late: "TIMEOUT"}
    # Each ending (a failure and a time-out too) released its allocation; no lease expired.
    assert sorted(a["status"] for a in ended) == ["released"] * 4
    _assert_no_gpu_assigned(world)
    # Either way each array task is named as sacct names it (`3_0`; squeue's `%i`), not by
    # the raw id Slurm gives it (`%A`), which no sacct row would match.
    task_ids = {raw: task for raw, task in (x.split() for x in ids.splitlines())}
    array_tasks = sorted(task for task in task_ids.values() if task.startswith(f"{array}_"))
    assert array_tasks == [f"{array}_0", f"{array}_1"]
    tasks = {failed: 1, late: 1, **{task: 1 for task in array_tasks}}
    rows = _agent_jobs(world)
    assert {r[0]: r[1] for r in rows} == tasks  # each array task a 1-GPU job of its own
    assert all(r[2] is not None and r[3] is not None for r in rows), rows
    assert time.monotonic() - began < 60
