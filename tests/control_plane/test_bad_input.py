"""Bad input on both databases: control characters, odd ids, far dates and GPU model names
are a 422 naming the field, never a 500 (PostgreSQL refuses a NUL in text at the INSERT)."""

from __future__ import annotations

import pytest
from fastapi import Request
from pydantic import ValidationError
from sqlalchemy import text

from control_plane.db.engine import Database
from control_plane.schemas.common import JsonInt, WireModel
from tests.control_plane.conftest import ADMIN, Api


def _refused(r, field: str) -> None:  # type: ignore[no-untyped-def]
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_request" and error["field"] == field, error
    assert field in error["message"]


@pytest.mark.parametrize("value", ["a\u0000b", "tab\there", "bell\u0007", "del\u007f", "c1\u0085"])
def test_control_characters_in_body_strings_are_422(api: Api, value: str) -> None:
    node = api.node("n1", gpus=2)
    tenant_id, headers = api.tenant(quota=2)
    _refused(
        api.http.post("/v1/allocations", json={"gpu_count": 1, "label": value}, headers=headers),
        "label",
    )
    _refused(
        api.http.post(
            "/v1/holds", json={"gpu_count": 1, "ttl_s": 60, "warmup": value}, headers=headers
        ),
        "warmup",
    )
    body = {"name": "n2", "spine": value, "gpus": []}
    _refused(api.http.post("/v1/nodes", json=body, headers=ADMIN), "spine")
    gpu = {"uuid": f"GPU-{value}", "model": "A100", "memory_mb": 1}
    _refused(
        api.http.post("/v1/nodes", json={"name": "n2", "gpus": [gpu]}, headers=ADMIN),
        "gpus.0.uuid",
    )
    _refused(
        api.http.post(f"/v1/tenants/{tenant_id}/api-keys", json={"label": value}, headers=ADMIN),
        "label",
    )
    _refused(
        api.http.put(
            f"/v1/policies/{tenant_id}", json={"allowed_warmups": ["ok", value]}, headers=ADMIN
        ),
        "allowed_warmups.1",
    )
    _refused(
        api.http.post(
            f"/v1/nodes/{node['id']}/heartbeat",
            json={"gpus": [{"uuid": f"GPU-{value}"}]},
            headers=ADMIN,
        ),
        "gpus.0.uuid",
    )
    # Nothing half-made: the refused requests left no allocation, hold or extra key behind.
    assert api.http.get("/v1/allocations", headers=headers).json() == []
    assert api.http.get("/v1/holds", headers=headers).json() == []
    assert len(api.http.get(f"/v1/tenants/{tenant_id}/api-keys", headers=ADMIN).json()) == 1


def test_a_command_may_span_lines_but_holds_no_nul(api: Api) -> None:
    api.node("n1", gpus=2)
    _, headers = api.tenant(quota=2)
    script = {"gpu_count": 1, "command": ["sh", "-c", "echo a\n\techo b"]}
    assert api.http.post("/v1/allocations", json=script, headers=headers).status_code == 201
    nul = {"gpu_count": 1, "command": ["sh", "-c", "echo a\u0000"]}
    _refused(api.http.post("/v1/allocations", json=nul, headers=headers), "command.2")


def test_lone_surrogate_is_422(api: Api) -> None:
    _, headers = api.tenant()
    r = api.http.post(
        "/v1/allocations",
        content=b'{"gpu_count": 1, "label": "\\ud800"}',
        headers={**headers, "Content-Type": "application/json"},
    )
    _refused(r, "label")


def test_reported_output_keeps_its_report_with_unsafe_characters_replaced(api: Api) -> None:
    node = api.node("n1", gpus=1)
    _, headers = api.tenant(quota=1)
    hold = api.http.post(
        "/v1/holds", json={"gpu_count": 1, "ttl_s": 600, "warmup": "w"}, headers=headers
    ).json()
    r = api.http.post(
        f"/v1/nodes/{node['id']}/holds/{hold['id']}/warmup",
        json={"ok": False, "warmup_s": 1, "exit_code": 3, "output_tail": "bad\u0000\u001b[0m\n"},
        headers=ADMIN,
    )
    assert r.status_code == 200, r.text
    failed = r.json()
    assert failed["status"] == "failed"
    # Kept, with what the databases cannot store (or a terminal would act on) replaced.
    assert "bad\ufffd\ufffd[0m" in failed["reason"] and "\u0000" not in failed["reason"]
    beat = {"gpus": [{"uuid": "GPU-n1-0", "healthy": False, "reason": "xid\u0000 79"}]}
    r = api.http.post(f"/v1/nodes/{node['id']}/heartbeat", json=beat, headers=ADMIN)
    assert r.status_code == 200, r.text
    events = api.http.get("/v1/events?object_id=GPU-n1-0", headers=ADMIN).json()
    assert [e["reason"] for e in events if e["to_state"] == "unhealthy"] == ["xid\ufffd 79"]


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/allocations/a%00b", "allocation_id"),
        ("/v1/allocations/alloc_0123456789abcdef%0A", "allocation_id"),
        ("/v1/holds/hold_%00", "hold_id"),
        ("/v1/holds/not-an-id", "hold_id"),
        ("/v1/tenants/tnt_%00", "tenant_id"),
        ("/v1/policies/x%00y", "tenant_id"),
        ("/v1/nodes/node%00", "node_id"),
    ],
)
def test_malformed_ids_in_paths_are_422(api: Api, path: str, field: str) -> None:
    _refused(api.http.get(path, headers=ADMIN), field)


def test_malformed_ids_in_writes_are_422(api: Api) -> None:
    _, headers = api.tenant()
    _refused(api.http.delete("/v1/allocations/a%00b", headers=headers), "allocation_id")
    _refused(api.http.post("/v1/holds/h%00/claim", headers=headers), "hold_id")
    _refused(
        api.http.post(
            "/v1/allocations", json={"gpu_count": 1, "hold_id": "h\u0000"}, headers=headers
        ),
        "hold_id",
    )
    _refused(
        api.http.post("/v1/nodes/n%00/heartbeat", json={}, headers=ADMIN),
        "node_id",
    )
    _refused(api.http.get("/v1/events?object_id=a%00b", headers=headers), "object_id")
    # A well-formed id that does not exist is still the ordinary 404.
    r = api.http.get("/v1/allocations/alloc_0123456789abcdef", headers=headers)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    "start_at",
    [
        "0001-01-01T00:00:00+14:00",
        "9999-12-31T23:59:59-14:00",
        "9999-12-31T23:59:59Z",
        "2300-01-01T00:00:00Z",
        "1969-12-31T23:59:59Z",
        "2200-01-01T00:00:00Z",
    ],
)
def test_start_at_out_of_range_is_422(api: Api, start_at: str) -> None:
    _, headers = api.tenant()
    body = {"gpu_count": 1, "ttl_s": 60, "start_at": start_at}
    r = api.http.post("/v1/holds", json=body, headers=headers)
    _refused(r, "start_at")
    assert "the year must be from 1970 to 2199" in r.json()["error"]["message"]


@pytest.mark.parametrize("model", ["A100", "H100-80GB", "RTX 4090", "a100_sxm4.80gb", "L4"])
def test_usual_gpu_models_register_and_match(api: Api, model: str) -> None:
    api.node("n1", gpus=1, model=model)
    _, headers = api.tenant(quota=1)
    r = api.http.post("/v1/allocations", json={"gpu_count": 1, "gpu_model": model}, headers=headers)
    assert r.status_code == 201, r.text


@pytest.mark.parametrize(
    "model", ["", " A100", "A100 ", "-A100", "A100;rm -rf", "a/b", "A\u0000", "é100", "x" * 65]
)
def test_odd_gpu_models_are_422(api: Api, model: str) -> None:
    gpu = {"uuid": "GPU-1", "model": model, "memory_mb": 1}
    r = api.http.post("/v1/nodes", json={"name": "n1", "gpus": [gpu]}, headers=ADMIN)
    _refused(r, "gpus.0.model")
    _, headers = api.tenant()
    for route, body in (
        ("/v1/allocations", {"gpu_count": 1, "gpu_model": model}),
        ("/v1/holds", {"gpu_count": 1, "ttl_s": 60, "gpu_model": model}),
    ):
        _refused(api.http.post(route, json=body, headers=headers), "gpu_model")


def test_policy_warmup_names_and_their_count_are_bounded(api: Api) -> None:
    tenant_id, _ = api.tenant()
    path = f"/v1/policies/{tenant_id}"
    _refused(
        api.http.put(path, json={"allowed_warmups": ["x" * 65]}, headers=ADMIN), "allowed_warmups.0"
    )
    _refused(api.http.put(path, json={"allowed_warmups": [""]}, headers=ADMIN), "allowed_warmups.0")
    many = [f"w{i}" for i in range(65)]
    _refused(api.http.put(path, json={"allowed_warmups": many}, headers=ADMIN), "allowed_warmups")
    ok = api.http.put(path, json={"allowed_warmups": ["x" * 64] * 64}, headers=ADMIN)
    assert ok.status_code == 200, ok.text


# SQLite stores any text and casts loosely: only PostgreSQL has something to refuse here.
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_value_the_database_refuses_is_422_not_500(api: Api, db: Database) -> None:

    def store(request: Request) -> dict:
        # A NUL the schemas did not catch, as a new route might forget to check one.
        with request.app.state.db.write() as session:
            session.execute(text("SELECT CAST(:v AS TEXT)"), {"v": "a\u0000b"})
        return {}

    api.http.app.add_api_route("/test/store", store, methods=["POST"])  # type: ignore[attr-defined]
    r = api.http.post("/test/store", headers=ADMIN)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_request"


def test_an_integer_field_of_a_request_body_must_be_json_int() -> None:
    # A plain int takes true and "3"; the body classes refuse to be made with one.
    with pytest.raises(TypeError, match="JsonInt"):

        class Body(WireModel):
            count: int

    class Checked(WireModel):
        count: JsonInt

    for bad in (True, "3"):
        with pytest.raises(ValidationError, match="must be an integer"):
            Checked.model_validate({"count": bad})
    assert Checked.model_validate({"count": 3.0}).count == 3
