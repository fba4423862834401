"""Node identity for tests: an enrolment token, and the node credential it buys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EnrolledNode:
    node_id: str
    name: str
    credential: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.credential}"}


def enrol_token(http: Any, name: str, admin: dict[str, str], **body: Any) -> str:
    """An enrolment token for node `name` (http: a TestClient or an httpx.Client)."""
    r = http.post("/v1/node-tokens", json={"node_name": name, **body}, headers=admin)
    assert r.status_code == 201, r.text
    return r.json()["key"]


def enrol_node(http: Any, name: str, admin: dict[str, str]) -> EnrolledNode:
    """Enrol node `name` as its agent does: enrolment token first, then the credential."""
    token = enrol_token(http, name, admin)
    r = http.post(
        "/v1/nodes/enrol", json={"name": name}, headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 201, r.text
    data = r.json()
    return EnrolledNode(node_id=data["node_id"], name=data["name"], credential=data["credential"])
