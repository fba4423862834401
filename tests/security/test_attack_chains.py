"""The attacks of the trust-boundary report, replayed against real processes on 127.0.0.1.

A server, two node agents (simulated GPUs) and two tenants. The victim runs a job on node B;
the intruder has a tenant key, and in chain 1 also node A's own credential; in chain 3 it has
nothing at all. Each attack is refused, and nothing of the victim's changes: its job keeps
running on its GPUs.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import yaml

from tests.security.rawhttp import huge_header_client, p95, slow_header_client
from tests.support.nodes import enrol_token
from tests.support.procs import JITGPU, Proc, ServerProc, wait_for

pytestmark = pytest.mark.e2e

ADMIN_TOKEN = "chain-admin-token-0123456789abcdef"
HEARTBEAT_TIMEOUT_S = 5.0
SERVER_ENV = {
    "JITGPU_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_TIMEOUT_S),
    "JITGPU_JOBS_INTERVAL_S": "0.5",
}


def start_node(tmp: Path, server: ServerProc, token: str, name: str, gpus: int) -> Proc:
    config = tmp / f"{name}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "heartbeat_interval_s": 0.5,
                "backoff": {"initial_s": 0.2, "max_s": 1.0},
                "cache_dir": str(tmp / f"cache-{name}"),
                "tasks": {"stop_grace_s": 2, "output_report_interval_s": 0.5},
            }
        )
    )
    args = [*JITGPU, "node", "--server", server.url, "--name", name]
    args += ["--simulated-gpus", str(gpus), "--config", str(config)]
    # The secrets sit in the agent's own environment, where a job used to find them.
    env = {"JITGPU_ENROL_TOKEN": token, "JITGPU_ADMIN_TOKEN": ADMIN_TOKEN}
    return Proc(args, log=tmp / f"{name}.log", env=env).start()


class Cluster:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.server = ServerProc(tmp, admin_token=ADMIN_TOKEN, env=SERVER_ENV).start()
        self.procs: list[Proc] = [self.server]

    def setup(self) -> None:
        self.server.wait_ready()
        self.admin = self.server.admin()
        self.keys = {}
        for name in ("victim", "intruder"):
            tenant = self.admin.post("/v1/tenants", json={"name": name, "quota_gpus": 4}).json()
            self.keys[name] = self.admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
        self.enrol_tokens = {n: enrol_token(self.admin, n, {}) for n in ("node-a", "node-b")}
        self.node_a = start_node(self.tmp, self.server, self.enrol_tokens["node-a"], "node-a", 1)
        self.node_b = start_node(self.tmp, self.server, self.enrol_tokens["node-b"], "node-b", 2)
        self.procs += [self.node_a, self.node_b]
        wait_for(self._both_online, timeout=40, what="both node agents online")
        self.ids = {n["name"]: n["id"] for n in self.admin.get("/v1/nodes").json()}

    def _both_online(self) -> bool:
        for p in (self.node_a, self.node_b):
            assert p.alive(), p.output()[-3000:]
        nodes = {n["name"]: n for n in self.admin.get("/v1/nodes").json()}
        return all(
            n in nodes and nodes[n]["status"] == "online" and len(nodes[n]["gpus"]) == count
            for n, count in (("node-a", 1), ("node-b", 2))
        )

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.server.url, timeout=10, headers={"Authorization": f"Bearer {token}"}
        )

    def credential(self, name: str) -> str:
        path = self.tmp / f"cache-{name}-state" / f"credential-{name}.json"
        return json.loads(path.read_text())["credential"]

    def run(self, tenant: str, gpus: int, command: list[str]) -> dict:
        with self.client(self.keys[tenant]) as c:
            body = {"gpu_count": gpus, "command": command, "use_holds": False}
            r = c.post("/v1/allocations", json=body)
            assert r.status_code == 201, r.text
            return r.json()

    def allocation(self, tenant: str, alloc_id: str) -> dict:
        with self.client(self.keys[tenant]) as c:
            return c.get(f"/v1/allocations/{alloc_id}").json()

    def close(self) -> None:
        for p in reversed(self.procs):
            p.stop()


@pytest.fixture
def cluster(tmp_path: Path):  # type: ignore[no-untyped-def]
    c = Cluster(tmp_path)
    try:
        c.setup()
        yield c
    finally:
        c.close()


def victim_job(cluster: Cluster) -> dict:
    """The victim's job: both of node B's GPUs, a task that runs until it is stopped."""
    alloc = cluster.run("victim", 2, ["sleep", "600"])
    assert {g["node"] for g in alloc["gpus"]} == {"node-b"}
    wait_for(
        lambda: cluster.allocation("victim", alloc["id"])["task_status"] == "running",
        timeout=20,
        what="the victim's task to run",
    )
    return cluster.allocation("victim", alloc["id"])


def assert_untouched(cluster: Cluster, before: dict) -> None:
    after = cluster.allocation("victim", before["id"])
    assert after["status"] == "allocated" and after["task_status"] == "running"
    assert [g["uuid"] for g in after["gpus"]] == [g["uuid"] for g in before["gpus"]]
    node_b = cluster.admin.get(f"/v1/nodes/{cluster.ids['node-b']}").json()
    assert node_b["status"] == "online"
    assert sorted(g["uuid"] for g in node_b["gpus"]) == sorted(g["uuid"] for g in before["gpus"])
    assert cluster.node_b.alive()


def test_chain_1_node_a_credential_cannot_act_as_node_b(cluster: Cluster) -> None:
    before = victim_job(cluster)
    b = cluster.ids["node-b"]
    b_gpus = [{"uuid": g["uuid"], "model": "A100", "memory_mb": 1} for g in before["gpus"]]
    with cluster.client(cluster.credential("node-a")) as as_a:
        # A heartbeat as node B used to return every job on B.
        beat = as_a.post(f"/v1/nodes/{b}/heartbeat", json={})
        assert beat.status_code == 403 and beat.json()["error"]["code"] == "wrong_node"
        assert before["id"] not in beat.text
        # "The task exited" for another tenant's job on B used to release it.
        task = as_a.post(
            f"/v1/nodes/{b}/allocations/{before['id']}/task", json={"status": "exited"}
        )
        assert task.status_code == 403 and task.json()["error"]["code"] == "wrong_node"
        # Re-registering B with no GPUs used to make B's allocations lost.
        empty = as_a.post("/v1/nodes", json={"name": "node-b", "gpus": []})
        assert empty.status_code == 403 and empty.json()["error"]["code"] == "wrong_node"
        # Registering B's GPUs elsewhere used to take them over.
        other = as_a.post("/v1/nodes", json={"name": "node-evil", "gpus": b_gpus})
        assert other.status_code == 403 and other.json()["error"]["code"] == "wrong_node"
        own = as_a.post("/v1/nodes", json={"name": "node-a", "gpus": b_gpus})
        assert own.status_code == 409 and own.json()["error"]["code"] == "gpu_owned"
    assert_untouched(cluster, before)
    # Node tokens can be revoked now: node A's credential dies, A is drained, B goes on.
    a_id = cluster.ids["node-a"]
    cred = next(
        t
        for t in cluster.admin.get("/v1/node-tokens").json()
        if t["kind"] == "credential" and t["node_id"] == a_id and t["revoked_at"] is None
    )
    assert cluster.admin.delete(f"/v1/node-tokens/{cred['id']}").status_code == 200
    with cluster.client(cluster.credential("node-a")) as as_a:
        assert as_a.post(f"/v1/nodes/{a_id}/heartbeat", json={}).status_code == 401
    wait_for(lambda: not cluster.node_a.alive(), timeout=20, what="node A's agent to stop")
    assert cluster.node_a.popen is not None and cluster.node_a.popen.returncode == 3
    assert cluster.admin.get(f"/v1/nodes/{a_id}").json()["status"] in ("draining", "offline")
    assert_untouched(cluster, before)
    assert cluster.admin.get("/v1/nodes").json()  # the server is still serving


def test_chain_2_a_job_finds_no_credential_to_use(cluster: Cluster) -> None:
    before = victim_job(cluster)
    spy = cluster.run("intruder", 1, ["sh", "-c", 'env; ls -a "$JITGPU_CACHE_DIR"'])
    assert {g["node"] for g in spy["gpus"]} == {"node-a"}
    done = wait_for(
        lambda: (a := cluster.allocation("intruder", spy["id"]))["task_status"] == "exited" and a,
        timeout=20,
        what="the intruder's job to end",
    )
    tail = done["output_tail"]
    assert f"JITGPU_ALLOCATION_ID={spy['id']}" in tail  # it did print its environment
    secrets = [
        ADMIN_TOKEN,
        *cluster.enrol_tokens.values(),
        cluster.credential("node-a"),
        cluster.credential("node-b"),
    ]
    for secret in secrets:
        assert secret not in tail
    for name in ("JITGPU_NODE_TOKEN", "JITGPU_ENROL_TOKEN", "JITGPU_ADMIN_TOKEN", "credential-"):
        assert name not in tail
    # With what a tenant holds, the victim's job on B cannot be ended either.
    with cluster.client(cluster.keys["intruder"]) as intruder:
        path = f"/v1/nodes/{cluster.ids['node-b']}/allocations/{before['id']}/task"
        assert intruder.post(path, json={"status": "exited"}).status_code == 403
        assert intruder.delete(f"/v1/allocations/{before['id']}").status_code == 404
    assert_untouched(cluster, before)


ATTACK_S = HEARTBEAT_TIMEOUT_S + 3  # a stalled server would have taken both nodes offline
P95_BOUND_S = 0.5


def _time_answers(cluster: Cluster, alloc_id: str, stop: threading.Event, out: list) -> None:
    """Other clients during the attack: an anonymous health check and the victim's own read."""
    with (
        httpx.Client(base_url=cluster.server.url, timeout=10) as anon,
        cluster.client(cluster.keys["victim"]) as victim,
    ):
        while not stop.is_set():
            t0 = time.perf_counter()
            assert anon.get("/healthz").status_code == 200
            t1 = time.perf_counter()
            assert victim.get(f"/v1/allocations/{alloc_id}").status_code == 200
            out.append((t1 - t0, time.perf_counter() - t1))
            time.sleep(0.1)


def test_chain_3_unauthenticated_huge_and_slow_heads_stall_nothing(cluster: Cluster) -> None:
    before = victim_job(cluster)
    started = datetime.now(UTC)
    stop = threading.Event()
    refused: list[int] = []
    answers: list[tuple[float, float]] = []
    url = cluster.server.url
    attackers = [
        threading.Thread(target=huge_header_client, args=(url, stop, refused)) for _ in range(2)
    ]
    attackers += [threading.Thread(target=slow_header_client, args=(url, stop)) for _ in range(10)]
    probe = threading.Thread(target=_time_answers, args=(cluster, before["id"], stop, answers))
    threads = [*attackers, probe]
    try:
        for t in threads:
            t.start()
        time.sleep(ATTACK_S)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)

    # The attacker never got a 100 MiB head in: each was answered 431 and cut off.
    assert refused, "no 100 MiB header was ever cut short"
    assert len(answers) > 20, "the other clients barely got answers"
    p95_health, p95_read = p95([a[0] for a in answers]), p95([a[1] for a in answers])
    print(
        f"{len(refused)} huge heads refused; p95 /healthz {p95_health * 1000:.1f} ms, "
        f"p95 tenant read {p95_read * 1000:.1f} ms over {len(answers)} rounds"
    )
    assert p95_health < P95_BOUND_S and p95_read < P95_BOUND_S
    # Heartbeats kept being taken: no node went offline, each was heard from during the attack.
    for node in cluster.admin.get("/v1/nodes").json():
        events = cluster.admin.get("/v1/events", params={"object_id": node["id"]}).json()
        assert not [e for e in events if e["to_state"] == "offline"], node["name"]
        assert node["status"] == "online", node["name"]
        heard = datetime.fromisoformat(node["last_heartbeat_at"])
        assert heard.replace(tzinfo=heard.tzinfo or UTC) > started, node["name"]
    assert cluster.node_a.alive()
    assert_untouched(cluster, before)
    assert "Traceback" not in cluster.server.output()
