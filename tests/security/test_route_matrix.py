"""Every route x every credential kind: who gets what. A route missing here fails the test."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from control_plane.api.app import create_app
from control_plane.config import ServerSettings
from tests.security.world import World, build

KINDS = ("none", "tenant", "other_tenant", "node", "other_node", "revoked_node", "admin")
# "tenant" owns the hold and the allocation on node B; "node" is node B's own credential,
# "other_node" node A's, "revoked_node" node B's credential before it was rotated.
N, T, OT, ND, ON, RV, AD = range(7)

PUBLIC = (200,) * 7
TENANT_ONLY = (401, 200, 200, 403, 403, 401, 403)
ADMIN_ONLY = (401, 403, 403, 403, 403, 401, 200)
OWN_TENANT_OR_ADMIN = (401, 200, 404, 403, 403, 401, 200)  # another tenant learns nothing
OWN_NODE_OR_ADMIN = (401, 403, 403, 200, 403, 401, 200)  # other node: 403 wrong_node

# (method, path) -> status per kind, in KINDS order.
EXPECTED: dict[tuple[str, str], tuple[int, ...]] = {
    ("GET", "/docs"): PUBLIC,
    ("GET", "/docs/oauth2-redirect"): PUBLIC,
    ("GET", "/redoc"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("GET", "/metrics"): PUBLIC,
    # Allocations and holds: tenants only; each sees its own (a list is filtered).
    ("POST", "/v1/allocations"): (401, 201, 201, 403, 403, 401, 403),
    ("GET", "/v1/allocations"): (401, 200, 200, 403, 403, 401, 200),
    ("GET", "/v1/allocations/{allocation_id}"): OWN_TENANT_OR_ADMIN,
    ("DELETE", "/v1/allocations/{allocation_id}"): OWN_TENANT_OR_ADMIN,
    ("POST", "/v1/holds"): (401, 201, 201, 403, 403, 401, 403),
    ("GET", "/v1/holds"): (401, 200, 200, 403, 403, 401, 200),
    ("GET", "/v1/holds/{hold_id}"): OWN_TENANT_OR_ADMIN,
    ("DELETE", "/v1/holds/{hold_id}"): OWN_TENANT_OR_ADMIN,
    ("POST", "/v1/holds/{hold_id}/claim"): (401, 201, 404, 403, 403, 401, 403),
    ("GET", "/v1/events"): (401, 200, 200, 403, 403, 401, 200),
    ("GET", "/v1/me"): (401, 200, 200, 403, 403, 401, 404),
    # Node routes: a node credential acts as its own node only; registration by name too.
    ("POST", "/v1/nodes"): (401, 403, 403, 201, 403, 401, 201),
    ("POST", "/v1/nodes/{node_id}/heartbeat"): OWN_NODE_OR_ADMIN,
    ("POST", "/v1/nodes/{node_id}/holds/{hold_id}/warmup"): OWN_NODE_OR_ADMIN,
    ("POST", "/v1/nodes/{node_id}/allocations/{allocation_id}/task"): OWN_NODE_OR_ADMIN,
    ("POST", "/v1/nodes/{node_id}/allocations/{allocation_id}/warmup"): OWN_NODE_OR_ADMIN,
    ("GET", "/v1/nodes/{node_id}"): OWN_NODE_OR_ADMIN,
    ("POST", "/v1/nodes/{node_id}/holds/{hold_id}/backend-event"): OWN_NODE_OR_ADMIN,
    ("POST", "/v1/nodes/{node_id}/credentials"): (401, 403, 403, 201, 403, 401, 201),
    # Enrolment takes an enrolment token or the admin token; a node credential cannot enrol.
    ("POST", "/v1/nodes/enrol"): (401, 403, 403, 403, 403, 401, 201),
    ("POST", "/v1/nodes/{node_id}/rotate"): (401, 403, 403, 403, 403, 401, 202),
    ("POST", "/v1/nodes/{node_id}/drain"): ADMIN_ONLY,
    ("POST", "/v1/nodes/{node_id}/undrain"): ADMIN_ONLY,
    ("GET", "/v1/nodes"): ADMIN_ONLY,
    ("GET", "/v1/gpus"): ADMIN_ONLY,
    ("POST", "/v1/gpus/{gpu_uuid}/move"): ADMIN_ONLY,
    ("POST", "/v1/node-tokens"): (401, 403, 403, 403, 403, 401, 201),
    ("GET", "/v1/node-tokens"): ADMIN_ONLY,
    ("DELETE", "/v1/node-tokens/{token_id}"): ADMIN_ONLY,
    # Tenants, keys and policies: the admin; a tenant reads only its own.
    ("POST", "/v1/tenants"): (401, 403, 403, 403, 403, 401, 201),
    ("GET", "/v1/tenants"): ADMIN_ONLY,
    ("GET", "/v1/tenants/{tenant_id}"): OWN_TENANT_OR_ADMIN,
    ("PATCH", "/v1/tenants/{tenant_id}"): ADMIN_ONLY,
    ("POST", "/v1/tenants/{tenant_id}/api-keys"): (401, 403, 403, 403, 403, 401, 201),
    ("GET", "/v1/tenants/{tenant_id}/api-keys"): ADMIN_ONLY,
    ("DELETE", "/v1/tenants/{tenant_id}/api-keys/{key_id}"): ADMIN_ONLY,
    ("GET", "/v1/policies/{tenant_id}"): OWN_TENANT_OR_ADMIN,
    ("PUT", "/v1/policies/{tenant_id}"): ADMIN_ONLY,
}

B_GPUS = [{"uuid": f"GPU-b-{i}", "model": "A100", "memory_mb": 81920, "index": i} for i in range(4)]
# A valid body for each route that takes one, so that the status is about who asks.
BODIES: dict[tuple[str, str], Callable[[World], Any]] = {
    ("POST", "/v1/allocations"): lambda w: {"gpu_count": 1},
    ("POST", "/v1/holds"): lambda w: {"gpu_count": 1, "ttl_s": 600},
    ("POST", "/v1/nodes"): lambda w: {"name": "node-b", "gpus": B_GPUS},
    ("POST", "/v1/nodes/{node_id}/holds/{hold_id}/warmup"): lambda w: {"ok": True, "warmup_s": 1.0},
    ("POST", "/v1/nodes/{node_id}/allocations/{allocation_id}/task"): lambda w: {
        "status": "running"
    },
    ("POST", "/v1/nodes/{node_id}/allocations/{allocation_id}/warmup"): lambda w: {
        "ok": True,
        "warmup_s": 1.0,
    },
    ("POST", "/v1/nodes/{node_id}/holds/{hold_id}/backend-event"): lambda w: {"kind": "ended"},
    ("POST", "/v1/nodes/enrol"): lambda w: {"name": "node-b"},
    ("POST", "/v1/gpus/{gpu_uuid}/move"): lambda w: {"node_id": w.node_a},
    ("POST", "/v1/node-tokens"): lambda w: {"node_name": "node-c"},
    ("POST", "/v1/tenants"): lambda w: {"name": "newcomer", "quota_gpus": 1},
    ("PATCH", "/v1/tenants/{tenant_id}"): lambda w: {"quota_gpus": 4},
    ("PUT", "/v1/policies/{tenant_id}"): lambda w: {"max_held_gpus": 2},
}


def app_routes(app: FastAPI) -> set[tuple[str, str]]:
    """(method, path) of every route the app serves, included routers' too (HEAD aside)."""
    out: set[tuple[str, str]] = set()
    for route in app.routes:
        contexts = (
            list(route.effective_route_contexts())
            if hasattr(route, "effective_route_contexts")
            else [route]
        )
        for ctx in contexts:
            for method in getattr(ctx, "methods", None) or ():
                if method != "HEAD":
                    out.add((method, ctx.path))
    return out


def fill(path: str, world: World) -> str:
    return path.format(
        allocation_id=world.allocation_id,
        hold_id=world.hold_id,
        node_id=world.node_b,
        tenant_id=world.tenant_id,
        key_id=world.tenant_key_id,
        token_id=world.node_b_credential_id,
        gpu_uuid=world.free_gpu,
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build(tmp_path_factory.mktemp("world"))


def test_every_route_of_the_app_has_a_row(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'routes.db'}"
    app = create_app(ServerSettings(database_url=url, admin_token="a" * 24, run_jobs=False))
    routes = app_routes(app)
    assert routes - set(EXPECTED) == set(), "add these routes to EXPECTED"
    assert set(EXPECTED) - routes == set(), "these rows name no route of the app"
    assert set(BODIES) <= routes


@pytest.mark.parametrize(("method", "path"), sorted(EXPECTED, key=lambda r: (r[1], r[0])))
def test_route_answers_each_credential_kind(
    method: str, path: str, world: World, tmp_path: Path
) -> None:
    body = BODIES.get((method, path), lambda w: None)(world)
    got: list[int] = []
    codes: list[str | None] = []
    # Kinds take turns on one copy of the world while they are refused (a refusal changes
    # nothing, and if it did the next answers would show it); after a write that succeeded
    # the next kind gets a fresh copy, so that one kind's success never hides another's answer.
    with ExitStack() as stack:
        http = None
        for kind in KINDS:
            if http is None:
                http = stack.enter_context(world.app(tmp_path / kind))
            r = http.request(method, fill(path, world), json=body, headers=world.headers[kind])
            got.append(r.status_code)
            error = r.json().get("error") if r.status_code >= 400 else None
            codes.append(error["code"] if error else None)
            if method != "GET" and r.status_code < 400:
                http = None
    assert dict(zip(KINDS, got, strict=True)) == dict(
        zip(KINDS, EXPECTED[(method, path)], strict=True)
    )
    if got[ND] < 400 and got[ON] == 403:
        # Where node B may act, node A is told it is the wrong node, not just "forbidden".
        assert codes[ON] == "wrong_node"
