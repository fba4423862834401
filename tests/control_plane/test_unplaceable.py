"""A request no cluster state could ever satisfy is refused at once, naming the field."""

from __future__ import annotations

from tests.control_plane.conftest import Api


def test_unknown_model_refused_at_once_for_allocations_and_holds(api: Api) -> None:
    api.node("n1", gpus=4, model="A100")
    _, headers = api.tenant(quota=8)
    for path, extra in (("/v1/allocations", {}), ("/v1/holds", {"ttl_s": 60})):
        body = {"gpu_count": 1, "gpu_model": "H100", **extra}
        r = api.http.post(path, json=body, headers=headers)
        assert r.status_code == 409, r.text
        error = r.json()["error"]
        assert error["field"] == "gpu_model" and error["code"] == "unplaceable"
        assert error["message"] == "no GPU of model 'H100' in the cluster (models: A100)"


def test_more_gpus_than_the_cluster_has_refused(api: Api) -> None:
    api.node("n1", gpus=4, model="A100")
    api.node("n2", gpus=2, model="H100")
    _, headers = api.tenant(quota=16)
    r = api.http.post(
        "/v1/allocations", json={"gpu_count": 5, "gpu_model": "A100"}, headers=headers
    )
    assert r.status_code == 409 and r.json()["error"]["field"] == "gpu_count"
    assert "the cluster has 4 A100 GPUs in all" in r.json()["error"]["message"]
    r = api.http.post("/v1/holds", json={"gpu_count": 7, "ttl_s": 60}, headers=headers)
    assert r.status_code == 409 and "has 6 GPUs in all" in r.json()["error"]["message"]
    # What fits the cluster but not its free GPUs now waits, and says why.
    api.http.post("/v1/allocations", json={"gpu_count": 4, "gpu_model": "A100"}, headers=headers)
    r = api.http.post(
        "/v1/allocations", json={"gpu_count": 3, "gpu_model": "A100"}, headers=headers
    )
    assert r.status_code == 202
    assert r.json()["reason"] == "queued: 3 A100 GPUs not free now (the cluster has 4 in all)"


def test_a_cluster_without_nodes_queues_and_says_so(api: Api) -> None:
    # Nodes may still be starting: nothing is refused for want of an inventory.
    _, headers = api.tenant(quota=8)
    r = api.http.post(
        "/v1/allocations", json={"gpu_count": 2, "gpu_model": "B200"}, headers=headers
    )
    assert r.status_code == 202
    assert r.json()["reason"] == "queued: no GPU node has registered yet"
    assert r.json()["time_to_gpu_s"] is None
    assert r.json()["time_to_gpu_note"] == "not yet known: the request waits for GPUs"
