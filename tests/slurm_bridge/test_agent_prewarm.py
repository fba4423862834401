"""End to end on a live Slurm: the smart agent's own forecast pre-warms the cloud node.

Real slurmctld and slurmd(s), `jitgpu server`, `jitgpu slurm-bridge` and `jitgpu agent run`
as processes. Nothing in the test makes a hold: the agent reads the researcher's jobs through
its Slurm source (twice: on a cluster with slurmdbd accounting it polls `sacct`, without it
`squeue --me`; the test writes no file for it), forecasts, and asks for the hold; the bridge
turns the hold into a power-up and a MAGNETIC reservation; the researcher's plain
`sbatch --gres=gpu:1` lands in it.

The forecast comes from the statistical `burst` predictor, not from an LLM: it is learned
from the researcher's own record and is deterministic, while a mocked LLM answer would be a
forecast the test wrote itself. Its confidence is P(next job within 10 minutes of the last
activity), the researcher's idle gaps shrunk toward a prior (0.69) times the chance the next
job is no larger (prior 0.9): 0.62 after one job (the priors alone), 0.69 once one gap has
been seen, whatever the wall-clock values, as long as the gap outlasts the agent's polling
delay. The policy's `min_confidence` 0.65 sits between: one job teaches nothing worth
holding for, the second is the researcher's cadence showing, and then the agent holds.

gpu1 is always on: pre-warming it saves nothing, so the site keeps jitgpu's holds off it
(drained in jitgpu; Slurm runs jobs there as ever), and the researcher's first two jobs of a
sweep fill it. The third needs cloud1, which is powered down.
"""

from __future__ import annotations

import getpass
import re
import sqlite3
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import ADMIN_TOKEN
from tests.support.procs import JITGPU, Proc, ServerProc, wait_for
from tests.support.slurm_cluster import (
    ALWAYS_ON,
    CLOUD,
    SlurmCluster,
    start_agent_on,
    start_or_skip,
)

pytestmark = [pytest.mark.slurm, pytest.mark.e2e]

BOOT_S = 6.0  # cloud1's boot: the wait a reactive job would have
# The researcher submits the sweep's jobs this far apart: long enough for the agent to see a
# job (a 5 s poll; slurmctld hands sacct its records a few seconds late), hold and boot.
CADENCE_S = {"squeue": 12.0, "sacct": 24.0}
HOLD_TTL_S = 30  # the policy's longest hold window: how long a wrong forecast costs
JOB_S = 10  # the sweep job's run: two of the agent's squeue polls see it
# Slurm 22.05 suspends an idle node even while it is reserved: keep it up past a hold window.
SUSPEND_S = 30


def _write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[dict]:
    mode = request.param
    cluster = start_or_skip(
        boot_delay_s=BOOT_S, suspend_time_s=SUSPEND_S, accounting=mode == "sacct"
    )
    procs: list[Proc] = []
    closers: list[httpx.Client] = []
    try:
        server = ServerProc(
            tmp_path, admin_token=ADMIN_TOKEN, env={"JITGPU_JOBS_INTERVAL_S": "1"}
        ).start()
        procs.append(server)
        server.wait_ready()
        with server.admin() as admin:
            tenant = admin.post("/v1/tenants", json={"name": "alice", "quota_gpus": 4}).json()
            key = admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
            enrol = {
                name: admin.post("/v1/node-tokens", json={"node_name": name}).json()["key"]
                for name in (ALWAYS_ON, CLOUD)
            }
        bridge_yaml = _write_yaml(
            tmp_path / "slurm-bridge.yaml",
            {
                "server": server.url,
                "enrol_tokens": enrol,
                "credentials_dir": str(tmp_path / "credentials"),
                "slurm_conf": str(cluster.layout.conf),
                "poll_s": 0.5,
                "resume_latency_s": BOOT_S,
                # The tests run as one Unix user: the researcher alice is that Slurm user.
                "tenants": {"alice": {"users": getpass.getuser()}},
                "state_file": str(tmp_path / "bridge.json"),
                "gpu_model": "A100",
            },
        )
        bridge = Proc(
            [*JITGPU, "slurm-bridge", "--config", str(bridge_yaml)],
            log=tmp_path / "bridge.log",
            env=cluster.env,
        ).start()
        procs.append(bridge)
        with server.admin() as admin:
            wait_for(
                lambda: len(admin.get("/v1/gpus").json()) == 4 or not bridge.alive(),
                timeout=30,
                what="both Slurm nodes' GPUs registered",
            )
            assert bridge.alive(), bridge.output()
            # Holding the always-on node saves no boot: the site keeps holds off it.
            gpu1 = next(n for n in admin.get("/v1/nodes").json() if n["name"] == ALWAYS_ON)
            assert admin.post(f"/v1/nodes/{gpu1['id']}/drain").status_code == 200
        alice = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=10
        )
        closers.append(alice)
        yield {
            "http": alice,
            "slurm": cluster,
            "server": server,
            "bridge": bridge,
            "key": key,
            "tmp": tmp_path,
            "procs": procs,
            "mode": mode,
        }
    finally:
        for client in closers:
            client.close()
        for proc in reversed(procs):
            proc.stop()
            # Shown only when the test fails: what each process said.
            print(f"--- {proc.log_path.name}\n{proc.output()[-4000:]}")
        cluster.stop()


def _start_agent(world: dict) -> Proc:
    tmp: Path = world["tmp"]
    _write_yaml(
        tmp / "policy.yaml",
        {
            "predictors": ["burst"],
            "ensemble": "off",
            "min_confidence": 0.65,
            "hold_ttl_s": HOLD_TTL_S,
            "max_gpus_per_hold": 2,
            "max_gpus_total": 4,
            "timezone": "UTC",
            # The bridge reports the node's boot as the hold's warm-up: ready once booted.
            "warmup": {"default": "boot"},
        },
    )
    _write_yaml(
        tmp / "agent.yaml",
        {
            "user": getpass.getuser(),  # whose jobs `squeue --me` lists
            "server": world["server"].url,
            "policy": "policy.yaml",
            "prediction_log": str(tmp / "predictions.db"),
            "cycle_s": 3600,  # no timer cycles: every forecast follows a job event
            "reconcile_s": 1,
            "debounce_s": 1,
            "watch": [],
            "slurm": {"poll": "on", "interval_s": 5},
        },
    )
    return start_agent_on(
        world["slurm"], tmp / "agent.yaml", key=world["key"], mode=world["mode"],
        procs=world["procs"],
    )  # fmt: skip


def _log(world: dict, sql: str) -> list[sqlite3.Row]:
    """Rows of the agent's prediction log (a reader beside the agent, WAL)."""
    path = world["tmp"] / "predictions.db"
    if not path.exists():
        return []
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    try:
        return db.execute(sql).fetchall()
    except sqlite3.OperationalError:  # the agent has not made its tables yet
        return []
    finally:
        db.close()


def _slurm_time(cluster: SlurmCluster, job: str, field: str) -> float:
    return datetime.fromisoformat(cluster.job_field(job, field)).timestamp()


def _reservations(cluster: SlurmCluster) -> str:
    return cluster.scontrol("show", "reservation", "-o", check=False).stdout


@pytest.mark.parametrize("world", ["squeue", "sacct"], indirect=True)
def test_agent_forecast_powers_up_reserves_and_a_wrong_one_powers_down(world: dict) -> None:
    cluster: SlurmCluster = world["slurm"]
    cadence_s = CADENCE_S[world["mode"]]
    began = time.monotonic()
    _start_agent(world)
    http: httpx.Client = world["http"]  # alice's
    holds = lambda: http.get("/v1/holds").json()  # noqa: E731
    assert "POWERED_DOWN" in cluster.node_state(CLOUD)
    time.sleep(1)  # the agent's first poll is its baseline: the sweep comes after it

    # The researcher's sweep: plain sbatch, one GPU each, CADENCE_S apart.
    first = cluster.sbatch("--gres=gpu:1", "--wrap=sleep 300")
    # One job: a forecast at the prior's confidence, below the policy's minimum: no hold.
    rejected = wait_for(
        lambda: _log(world, "SELECT * FROM forecasts WHERE decision != 'shadow'"),
        timeout=20,
        what="the agent's first forecast",
    )
    assert [(r["decision"], r["hold_id"]) for r in rejected] == [("rejected", None)]
    assert "below min_confidence" in rejected[0]["reason"]
    assert holds() == []
    time.sleep(max(0.0, _slurm_time(cluster, first, "SubmitTime") + cadence_s - time.time()))
    second = cluster.sbatch("--gres=gpu:1", "--wrap=sleep 300")
    for job in (first, second):
        wait_for(lambda j=job: cluster.job_field(j, "JobState") == "RUNNING", timeout=10,
                 what=f"job {job} running")  # fmt: skip
        assert cluster.job_field(job, "NodeList") == ALWAYS_ON

    # The second job is the cadence showing: the agent holds a GPU for the next one. gpu1
    # is full and kept out of holds: the hold lands on cloud1, powered down.
    hold = wait_for(lambda: holds() or None, timeout=20, what="the agent's hold")[0]
    assert hold["source"] == "agent" and hold["gpu_count"] == 1
    assert {g["node"] for g in hold["gpus"]} == {CLOUD}
    # The agent writes the hold's id into its log once the server has answered.
    made = wait_for(
        lambda: _log(world, "SELECT * FROM forecasts WHERE hold_id IS NOT NULL"),
        timeout=10,
        what="the hold in the prediction log",
    )
    assert [(r["predictor"], r["hold_id"], r["decision"]) for r in made] == [
        ("burst", hold["id"], "accepted")
    ]
    name = f"jitgpu-{hold['id']}"
    # The bridge reserves cloud1 for alice and boots it; the hold is ready once it is up.
    ready = wait_for(
        lambda: (lambda h: h if h["status"] == "ready" else None)(
            http.get(f"/v1/holds/{hold['id']}").json()
        ),
        timeout=BOOT_S + 15,
        what="the hold ready once cloud1 booted",
    )
    assert ready["warmup_s"] >= BOOT_S
    assert f"ReservationName={name} " in _reservations(cluster)
    # slurmctld flags the node RESERVED at its next look at reservations, not at creation.
    wait_for(lambda: cluster.node_state(CLOUD) == "IDLE+CLOUD+RESERVED", timeout=10,
             what="cloud1 flagged reserved")  # fmt: skip
    assert "powering up cloud1" in world["bridge"].output()

    # The researcher's next job of the sweep, on cadence: a plain sbatch naming nothing.
    time.sleep(max(0.0, _slurm_time(cluster, second, "SubmitTime") + cadence_s - time.time()))
    third = cluster.sbatch("--gres=gpu:1", f"--wrap=sleep {JOB_S}")
    claimed = wait_for(
        lambda: (lambda h: h if h["status"] == "claimed" else None)(
            http.get(f"/v1/holds/{hold['id']}").json()
        ),
        timeout=15,
        what="the claim",
    )
    # The agent may claim while the job is still pending: its reservation waits for it.
    wait_for(
        lambda: cluster.job_field(third, "JobState") == "RUNNING",
        timeout=10,
        what="the third job running",
    )
    assert cluster.job_field(third, "Reservation") == name
    assert cluster.job_field(third, "NodeList") == CLOUD
    waited = _slurm_time(cluster, third, "StartTime") - _slurm_time(cluster, third, "SubmitTime")
    assert waited <= 2.0 < BOOT_S  # no boot wait: cloud1 was up when the job came
    # Claimed by whoever saw the job first: the agent (polling squeue, it may see the job
    # pending) or the bridge (the job running in the reservation, times by Slurm's clock).
    alloc = http.get(f"/v1/allocations/{claimed['allocation_id']}").json()
    assert alloc["label"] in (None, f"job {third}")
    assert alloc["time_to_gpu_s"] is not None and alloc["time_to_gpu_s"] <= 2.0
    # The agent's record: the forecast's hold was claimed, by this job, warm.
    job_row = wait_for(
        lambda: _log(world, f"SELECT * FROM jobs WHERE job_ref='{third}' AND hold_id IS NOT NULL"),
        timeout=10,
        what="the claim in the prediction log",
    )[0]
    assert (job_row["hold_id"], job_row["allocation_id"]) == (hold["id"], alloc["id"])
    assert job_row["warm"] == 1 and job_row["time_to_gpu_s"] <= 2.0
    [claim] = _log(world, f"SELECT * FROM forecasts WHERE hold_id='{hold['id']}'")
    assert (claim["outcome"], claim["job_id"]) == ("claimed", job_row["id"])

    # The agent forecasts another job; none comes. The hold expires, its reservation goes,
    # and Slurm's power saving suspends cloud1 again.
    wrong = wait_for(
        lambda: [h for h in holds() if h["id"] != hold["id"] and h["gpus"]] or None,
        timeout=20,
        what="the agent's next hold, placed",
    )[0]
    assert wrong["source"] == "agent" and {g["node"] for g in wrong["gpus"]} == {CLOUD}
    wait_for(
        lambda: f"ReservationName=jitgpu-{wrong['id']} " in _reservations(cluster),
        timeout=10,
        what="the wrong forecast's reservation",
    )
    wait_for(
        lambda: _log(world, f"SELECT * FROM forecasts WHERE hold_id='{wrong['id']}' "
                     "AND outcome='expired'"),
        timeout=HOLD_TTL_S + 15,
        what="the wrong forecast's hold expired in the prediction log",
    )  # fmt: skip
    assert http.get(f"/v1/holds/{wrong['id']}").json()["status"] == "expired"
    wait_for(
        lambda: f"jitgpu-{wrong['id']}" not in _reservations(cluster),
        timeout=10,
        what="the wrong forecast's reservation deleted",
    )
    # Powering down: Slurm ran the suspend program (slurmd is gone); powered down after
    # SuspendTimeout.
    wait_for(
        lambda: {"POWERING_DOWN", "POWERED_DOWN"} & set(cluster.node_state(CLOUD).split("+")),
        timeout=SUSPEND_S + 20,
        what="cloud1 powered down again",
    )
    # Every hold was the agent's, and cloud1 was powered up once, by the bridge, for it.
    assert sorted(h["id"] for h in holds()) == sorted([hold["id"], wrong["id"]])
    resumes = re.findall(r"^[0-9.]+ (\S+)$", cluster.layout.resume_log.read_text(), re.M)
    assert resumes == [CLOUD]
    assert time.monotonic() - began < 100 + 3 * (cadence_s - CADENCE_S["squeue"])
