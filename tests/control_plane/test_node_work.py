"""The node's long poll: answers at once when behind, wakes on a commit that touches the node."""

from __future__ import annotations

import threading
import time

import pytest

from control_plane.db.engine import Database
from control_plane.db.session import touch_nodes
from tests.control_plane.conftest import ADMIN, Api


def _work(api: Api, node_id: str, **params: object) -> dict:
    r = api.http.get(f"/v1/nodes/{node_id}/work", params=params, headers=ADMIN)
    assert r.status_code == 200, r.text
    return r.json()


def test_work_answers_at_once_without_or_with_an_old_version(api: Api) -> None:
    node = api.node("n1", gpus=2)
    first = _work(api, node["id"])
    assert first["assignments"] == [] and isinstance(first["epoch"], int)
    started = time.monotonic()
    again = _work(api, node["id"], since="another-process.7", wait=30)
    assert time.monotonic() - started < 5
    assert again["version"] == first["version"]


def test_a_placement_on_the_node_wakes_its_poll_and_not_another_nodes(api: Api) -> None:
    n1 = api.node("n1", gpus=1)
    n2 = api.node("n2", gpus=1, model="H100", leaf="leaf1")
    _, headers = api.tenant(quota=1)
    v1 = _work(api, n1["id"])["version"]
    v2 = _work(api, n2["id"])["version"]
    answers: dict[str, tuple[float, dict]] = {}

    def poll(name: str, node_id: str, version: str, wait: float) -> None:
        started = time.monotonic()
        reply = _work(api, node_id, since=version, wait=wait)
        answers[name] = (time.monotonic() - started, reply)

    waiters = [
        threading.Thread(target=poll, args=("n1", n1["id"], v1, 30)),
        threading.Thread(target=poll, args=("n2", n2["id"], v2, 2)),
    ]
    for w in waiters:
        w.start()
    time.sleep(0.2)  # let both polls reach the server before the change (bounded, not awaited)
    body = {"gpu_count": 1, "gpu_model": "A100", "command": ["true"]}
    alloc = api.http.post("/v1/allocations", json=body, headers=headers)
    assert alloc.status_code == 201, alloc.text
    for w in waiters:
        w.join(timeout=35)
    assert alloc.json()["gpus"][0]["node"] == "n1"
    took, reply = answers["n1"]
    assert took < 10, "the poll waited for its timeout instead of the change"
    assert [a["id"] for a in reply["assignments"]] == [alloc.json()["id"]]
    assert reply["assignments"][0]["command"] == ["true"]
    # The other node's poll saw no change: it ran to its (short) timeout, with nothing new.
    assert answers["n2"][1]["assignments"] == [] and answers["n2"][0] >= 1.9


def test_work_is_for_nodes_and_admins_and_names_bad_input(api: Api) -> None:
    node = api.node("n1", gpus=1)
    _, headers = api.tenant()
    r = api.http.get(f"/v1/nodes/{node['id']}/work", headers=headers)
    assert r.status_code == 403
    r = api.http.get("/v1/nodes/node_0123456789abcdef/work", headers=ADMIN)
    assert r.status_code == 404
    r = api.http.get(f"/v1/nodes/{node['id']}/work", params={"wait": 999}, headers=ADMIN)
    assert r.status_code == 422 and "wait" in r.text


def test_a_node_reports_only_on_its_own_allocations_before_and_after_they_end(api: Api) -> None:
    n1 = api.node("n1", gpus=1)
    n2 = api.node("n2", gpus=1, model="H100", leaf="leaf1")
    _, headers = api.tenant(quota=2)
    body = {"gpu_count": 1, "gpu_model": "A100", "command": ["true"]}
    alloc = api.http.post("/v1/allocations", json=body, headers=headers).json()

    def report(node: dict, status: str) -> int:
        path = f"/v1/nodes/{node['id']}/allocations/{alloc['id']}/task"
        return api.http.post(
            path, json={"status": status, "exit_code": 0}, headers=ADMIN
        ).status_code

    assert report(n2, "running") == 404
    assert report(n1, "running") == 200
    assert report(n1, "exited") == 200
    shown = api.http.get(f"/v1/allocations/{alloc['id']}", headers=headers).json()
    assert shown["status"] == "released" and shown["task_status"] == "exited"
    # Ended, its last GPUs still name the node: a late repeat is answered, not refused.
    assert report(n1, "exited") == 200
    assert report(n2, "exited") == 404


def test_nodes_are_told_only_after_a_commit(db: Database) -> None:
    told: list[set[str]] = []
    remove = db.on_commit(told.append)
    try:
        with pytest.raises(RuntimeError), db.write() as session:
            touch_nodes(session, ["node_a"])
            raise RuntimeError("rolled back")
        assert told == []
        with db.write() as session:
            touch_nodes(session, ["node_a", "node_b"])
        with db.write():
            pass  # touched nothing: nobody is told
        assert told == [{"node_a", "node_b"}]
    finally:
        remove()
