"""The bridge against a live Slurm: holds become reservations, a plain sbatch claims them."""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest

from control_plane.schemas.nodes import Heartbeat
from tests.slurm_bridge.conftest import ADMIN, World
from tests.support.procs import wait_for
from tests.support.slurm_cluster import ALWAYS_ON, CLOUD

pytestmark = pytest.mark.slurm


def _accounted(world: World, job: str) -> tuple[str, str] | None:
    """The job's reservation and AllocTRES in sacct, once slurmdbd has them."""
    out = world.slurm.run("sacct", "-X", "-n", "-P", "-j", job, "--format=Reservation,AllocTRES")
    row = out.stdout.strip().split("|")
    return (row[0], row[1]) if len(row) == 2 and row[0] else None


def _gpus_on(world: World, node: str) -> list[dict]:
    return [g for g in world.http.get("/v1/gpus", headers=ADMIN).json() if g["node"] == node]


@pytest.mark.parametrize("world", ["no-accounting", "accounting"], indirect=True)
def test_hold_powers_up_reserves_and_a_plain_sbatch_claims_it(world: World) -> None:
    # gpu1 is busy with a job outside jitgpu: its GPUs leave placement, the hold goes to the
    # powered-down cloud node.
    busy = world.slurm.sbatch("--gres=gpu:2", "-w", ALWAYS_ON, "--wrap=sleep 120")
    world.until(
        lambda: all(not g["healthy"] for g in _gpus_on(world, ALWAYS_ON)) or None,
        "gpu1's GPUs reported busy",
    )
    assert world.slurm.node_state(CLOUD) == "IDLE+CLOUD+POWERED_DOWN"
    hold = world.hold(ttl_s=300, warmup="boot")
    assert {g["node"] for g in hold["gpus"]} == {CLOUD}
    name = f"jitgpu-{hold['id']}"
    ready = world.until(
        lambda: world.get_hold(hold["id"]) if world.get_hold(hold["id"])["status"] == "ready"
        else None,
        "hold ready once cloud1 booted",
    )  # fmt: skip
    assert ready["warmup_s"] >= world.slurm.layout.boot_delay_s
    assert world.bridge.resume_latency_s >= world.slurm.layout.boot_delay_s
    assert name in world.reservations()
    # slurmctld flags the node RESERVED at its next look at reservations, not at creation.
    world.until(
        lambda: world.slurm.node_state(CLOUD) == "IDLE+CLOUD+RESERVED" or None, "cloud1 reserved"
    )
    # The researcher's unchanged sbatch: it names no reservation.
    job = world.slurm.sbatch("--gres=gpu:1", "--wrap=sleep 30")
    claimed = world.until(
        lambda: world.get_hold(hold["id"]) if world.get_hold(hold["id"])["status"] == "claimed"
        else None,
        "claim reported",
    )  # fmt: skip
    assert world.slurm.job_field(job, "Reservation") == name
    assert world.slurm.job_field(job, "NodeList") == CLOUD
    alloc = world.http.get(
        f"/v1/allocations/{claimed['allocation_id']}", headers=world.tenant
    ).json()
    # Time-to-GPU from Slurm's own Submit/Start: no boot wait.
    assert alloc["time_to_gpu_s"] is not None and alloc["time_to_gpu_s"] <= 2.0
    assert alloc["label"] == f"job {job}"
    if world.slurm.layout.accounting:
        # slurmdbd records the job in the hold's reservation, with its GPU.
        reservation, tres = world.until(lambda: _accounted(world, job), "the job accounted")
        assert reservation == name and "gres/gpu=1" in tres.split(",")
    # The rest of the window is given back (a reservation with a running job cannot be
    # deleted: it ends now); the job runs on, past the reservation's end.
    world.until(
        lambda: world.reservations()[name].end.timestamp() <= time.time() or None,
        "reservation ended",
    )
    time.sleep(1.5)
    assert world.slurm.job_field(job, "JobState") == "RUNNING"
    world.slurm.run("scancel", job)
    world.until(
        lambda: (
            world.http.get(f"/v1/allocations/{alloc['id']}", headers=world.tenant).json()["status"]
            == "released"
            or None
        ),
        "allocation released when the job ended",
    )
    world.slurm.run("scancel", busy)


def test_wrong_forecast_expires_and_the_node_powers_down_again(world: World) -> None:
    world.slurm.sbatch("--gres=gpu:2", "-w", ALWAYS_ON, "--wrap=sleep 120")
    world.until(
        lambda: all(not g["healthy"] for g in _gpus_on(world, ALWAYS_ON)) or None, "gpu1 busy"
    )
    hold = world.hold(ttl_s=6)
    name = f"jitgpu-{hold['id']}"
    world.until(lambda: name in world.reservations() or None, "reservation made")
    world.until(lambda: world.get_hold(hold["id"])["status"] == "expired" or None, "expiry")
    world.until(lambda: name not in world.reservations() or None, "reservation deleted")
    # No job came: Slurm's power saving suspends the node again after SuspendTime.
    world.until(
        lambda: "POWERED_DOWN" in world.slurm.node_state(CLOUD) or None,
        "cloud1 powered down",
        timeout=40,
    )


def test_restart_adopts_and_an_admin_deleted_reservation_ends_the_hold(world: World) -> None:
    hold = world.hold(ttl_s=300, start_in_s=3600, lead_s=3600)
    name = f"jitgpu-{hold['id']}"
    world.until(lambda: name in world.reservations() or None, "reservation made")
    # Not powered up: start_at is an hour away, further than the resume latency.
    node = world.get_hold(hold["id"])["gpus"][0]["node"]
    if node == CLOUD:
        assert "POWERED_DOWN" in world.slurm.node_state(CLOUD)
    # A restarted bridge adopts the reservation by its name, and makes no second one.
    world.bridge = world.new_bridge()
    assert world.bridge.adopt() == [hold["id"]]
    world.tick()
    world.tick()
    assert list(world.reservations()) == [name]
    # An admin deletes it: the hold ends, with the reason, and it is never made again.
    world.slurm.scontrol("delete", f"reservation={name}")
    ended = world.until(
        lambda: world.get_hold(hold["id"]) if world.get_hold(hold["id"])["status"] == "cancelled"
        else None,
        "hold ended",
    )  # fmt: skip
    assert "deleted" in ended["reason"]
    for _ in range(3):
        world.tick()
        time.sleep(0.2)
    assert world.reservations() == {}


def test_another_users_job_waits_at_most_until_the_hold_ends(world: World) -> None:
    other = "nobody"
    # The tenant's budget bounds every hold's window: a longer one is refused outright.
    tenants = world.http.get("/v1/tenants", headers=ADMIN).json()
    alice = next(t["id"] for t in tenants if t["name"] == "alice")
    r = world.http.put(f"/v1/policies/{alice}", json={"max_hold_ttl_s": 8}, headers=ADMIN)
    assert r.status_code == 200, r.text
    r = world.http.post("/v1/holds", json={"gpu_count": 2, "ttl_s": 9}, headers=world.tenant)
    assert r.status_code == 403 and r.json()["error"]["code"] == "policy_max_hold_ttl_s"
    world.slurm.sbatch("--gres=gpu:2", "-w", ALWAYS_ON, "--wrap=sleep 120")
    world.until(
        lambda: all(not g["healthy"] for g in _gpus_on(world, ALWAYS_ON)) or None, "gpu1 busy"
    )
    hold = world.hold(ttl_s=8)
    name = f"jitgpu-{hold['id']}"
    world.until(lambda: name in world.reservations() or None, "reservation made")
    expires = world.reservations()[name].end
    assert expires is not None
    # Someone else's job, wanting the only free GPUs: kept off the reserved node...
    job = world.slurm.sbatch("--gres=gpu:1", "--output=/dev/null", "--wrap=sleep 5", user=other)
    world.tick()
    time.sleep(1.0)
    assert world.slurm.job_field(job, "JobState") == "PENDING"
    # ... but only until the hold's window, bounded by the tenant's budget, ends.
    world.until(
        lambda: world.slurm.job_field(job, "JobState") in ("RUNNING", "COMPLETED") or None,
        "the other user's job started",
        timeout=60,
    )
    # Slurm ends the reservation at the window's end (whole seconds), jitgpu the hold.
    world.until(lambda: world.get_hold(hold["id"])["status"] == "expired" or None, "expiry")
    # It started when the window ended (Slurm's whole seconds), not later: the hold kept it
    # waiting for no more than the window the budget allowed.
    started = datetime.fromisoformat(world.slurm.job_field(job, "StartTime")).timestamp()
    assert expires.timestamp() <= started <= expires.timestamp() + 3


def test_a_rotation_asked_of_a_slurm_node_is_done_kept_and_the_old_credential_dies(
    world: World,
) -> None:
    world.until(lambda: len(_gpus_on(world, CLOUD)) == 2 or None, "cloud1 registered")
    node_id = world.bridge.node_ids[CLOUD]
    stored = world.state_file.parent / f"credential-{CLOUD}.json"
    old = json.loads(stored.read_text())["credential"]
    r = world.http.post(f"/v1/nodes/{node_id}/rotate", headers=ADMIN)
    assert r.status_code == 202, r.text
    world.tick()
    new = json.loads(stored.read_text())["credential"]
    assert new != old and new.startswith("jgn_")
    assert oct(stored.stat().st_mode & 0o777) == "0o600"
    # The old credential is void; the bridge goes on acting as cloud1 with the new one...
    beat = {"gpus": []}
    gone = world.http.post(
        f"/v1/nodes/{node_id}/heartbeat", json=beat, headers={"Authorization": f"Bearer {old}"}
    )
    assert gone.status_code == 401, gone.text
    world.tick()
    assert (
        world.bridge.clients[CLOUD].heartbeat(node_id, Heartbeat(gpus=[])).rotate_credential
        is False
    )
    # ... and so does a restarted bridge, from the file.
    world.bridge = world.new_bridge()
    world.tick()
    assert world.bridge.node_ids[CLOUD] == node_id
    assert len(_gpus_on(world, CLOUD)) == 2


def test_a_hold_claimed_through_jitgpu_keeps_its_reservation_until_its_job_runs(
    world: World,
) -> None:
    # The smart agent claims a hold as soon as it sees the job, often still pending in Slurm.
    world.slurm.sbatch("--gres=gpu:2", "-w", ALWAYS_ON, "--wrap=sleep 120")
    world.until(
        lambda: all(not g["healthy"] for g in _gpus_on(world, ALWAYS_ON)) or None, "gpu1 busy"
    )
    hold = world.hold(ttl_s=120, gpu_count=1, warmup="boot")
    name = f"jitgpu-{hold['id']}"
    world.until(lambda: world.get_hold(hold["id"])["status"] == "ready" or None, "cloud1 up")
    r = world.http.post(f"/v1/holds/{hold['id']}/claim", json={}, headers=world.tenant)
    assert r.status_code == 201, r.text
    for _ in range(3):
        world.tick()
        time.sleep(0.2)
    # Claimed, no longer kept as a hold; its reservation still waits for the job.
    end = world.reservations()[name].end
    assert end is not None and end.timestamp() > time.time() + 60
    job = world.slurm.sbatch("--gres=gpu:1", "--wrap=sleep 30")
    world.until(
        lambda: world.slurm.job_field(job, "JobState") == "RUNNING" or None,
        "the job ran",
    )
    assert world.slurm.job_field(job, "Reservation") == name
    assert world.slurm.job_field(job, "NodeList") == CLOUD
    # It ran in the reservation: the rest of the window is given back.
    world.until(
        lambda: name not in world.reservations() or world.reservations()[name].end.timestamp()
        <= time.time() or None,
        "reservation ended",
    )  # fmt: skip
    world.slurm.run("scancel", job)


def test_a_job_in_a_holds_reservation_is_never_reported_as_an_outsider(world: World) -> None:
    world.slurm.sbatch("--gres=gpu:2", "-w", ALWAYS_ON, "--wrap=sleep 120")
    world.until(
        lambda: all(not g["healthy"] for g in _gpus_on(world, ALWAYS_ON)) or None, "gpu1 busy"
    )
    hold = world.hold(ttl_s=120, gpu_count=1, warmup="boot")
    world.until(lambda: world.get_hold(hold["id"])["status"] == "ready" or None, "cloud1 up")
    job = world.slurm.sbatch("--gres=gpu:1", "--wrap=sleep 30")
    wait_for(
        lambda: world.slurm.job_field(job, "JobState") == "RUNNING",
        timeout=15,
        what="the job running in the reservation",
    )
    # One step: it heartbeats first, then reports the claim. The job uses the held GPU:
    # cloud1's other GPU stays free for the next hold.
    world.tick()
    assert world.get_hold(hold["id"])["status"] == "claimed"
    assert all(g["healthy"] for g in _gpus_on(world, CLOUD))
    world.slurm.run("scancel", job)
