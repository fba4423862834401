"""The smart agent against a live Slurm: a real slurmctld/slurmd, the control plane and a
simulated node as processes, the agent polling squeue itself (no accounting: sacct fails and
the Slurm source falls back). Researcher jobs submitted with `sbatch --gres=gpu:N` are seen
arriving and ending with their GPU counts, each gets one allocation of that many GPUs, a CPU
job gets none, and nothing the agent allocated stays allocated once the jobs have ended."""

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
from tests.support.slurm_cluster import SlurmCluster, start_or_skip

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict]:
    cluster = start_or_skip(gpus_per_node=4)
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
        yield {"slurm": cluster, "server": server, "key": key, "tmp": tmp_path, "procs": procs}
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
    cluster: SlurmCluster = world["slurm"]
    agent = Proc(
        [*JITGPU, "agent", "run", "--config", str(tmp / "agent.yaml")],
        log=tmp / "agent.log",
        env={**cluster.env, "JITGPU_TOKEN": world["key"]},
    ).start()
    world["procs"].append(agent)
    wait_for(
        lambda: "agent for" in agent.output() or not agent.alive(),
        timeout=30,
        what="the agent to start",
    )
    assert agent.alive(), agent.output()
    return agent


def test_agent_follows_live_slurm_jobs_and_leaves_nothing_allocated(world: dict) -> None:
    cluster: SlurmCluster = world["slurm"]
    began = time.monotonic()
    agent = _start_agent(world)
    headers = {"Authorization": f"Bearer {world['key']}"}
    with httpx.Client(base_url=world["server"].url, headers=headers, timeout=10) as http:
        time.sleep(1)  # the agent's first poll is its baseline: jobs come after it
        jobs = {
            cluster.sbatch("--gres=gpu:1", "--wrap=sleep 6"): 1,
            cluster.sbatch("--gres=gpu:2", "--wrap=sleep 9"): 2,
            cluster.sbatch("--wrap=sleep 3"): 0,  # a CPU job: no GPU for it
        }

        def allocations() -> list[dict]:
            return http.get("/v1/allocations").json()

        arrived = wait_for(
            lambda: (lambda a: a if len(a) == 2 else None)(allocations()),
            timeout=20,
            what=f"an allocation per GPU job\n{agent.output()[-3000:]}",
        )
        assert sorted(a["gpu_count"] for a in arrived) == [1, 2]
        assert all(a["status"] == "allocated" and a["lease_s"] for a in arrived)
        wait_for(
            lambda: not cluster.run("squeue", "-h", "-o", "%i").stdout.split(),
            timeout=30,
            what="the jobs to end",
        )
        ended = wait_for(
            lambda: (lambda a: a if all(x["status"] != "allocated" for x in a) else None)(
                allocations()
            ),
            timeout=15,
            what=f"the allocations released\n{agent.output()[-3000:]}",
        )
    # Released by the agent on seeing each job end, not expired by the lease.
    assert sorted((a["gpu_count"], a["status"]) for a in ended) == [
        (1, "released"),
        (2, "released"),
    ]
    with world["server"].admin() as admin:
        assert all(g["assigned_to"] is None for g in admin.get("/v1/gpus").json())
    # The agent's own record: each job's arrival with its GPU count, and its end.
    db = sqlite3.connect(world["tmp"] / "predictions.db")
    rows = db.execute("SELECT job_ref, gpus, allocation_id, ended_at FROM jobs").fetchall()
    db.close()
    assert {r[0]: r[1] for r in rows} == jobs
    assert all(r[3] is not None for r in rows if r[1])  # every GPU job seen to end
    assert [r[0] for r in rows if r[2] is not None] == [j for j, n in jobs.items() if n]
    assert time.monotonic() - began < 60
