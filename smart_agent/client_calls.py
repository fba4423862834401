"""The REST calls as data (method, path, body, parser), shared by the sync and async clients."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from control_plane.schemas.allocations import Allocation, Hold
from control_plane.schemas.events import Event
from control_plane.schemas.node_identity import (
    EnrolTokenCreated,
    NodeCredential,
    NodeTokenInfo,
    RotationRequested,
)
from control_plane.schemas.nodes import Gpu, Node
from control_plane.schemas.tenants import ApiKeyCreated, Tenant, TenantPolicyInfo

_allocations = TypeAdapter(list[Allocation])
_holds = TypeAdapter(list[Hold])
_nodes = TypeAdapter(list[Node])
_gpus = TypeAdapter(list[Gpu])
_events = TypeAdapter(list[Event])
_tenants = TypeAdapter(list[Tenant])
_node_tokens = TypeAdapter(list[NodeTokenInfo])


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    parse: Callable[[Any], Any]
    body: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    idempotency_key: str | None = None
    # The answer is a secret shown once (an API key, a node token): the server refuses an
    # Idempotency-Key there (it would have to store the secret), and a retry could mint a
    # second one, so such a call is sent once, without a key.
    secret: bool = False

    @property
    def idempotent_post(self) -> bool:
        # GET, PUT and DELETE are idempotent by design; a POST gets an Idempotency-Key, so
        # every call is safe to retry.
        return self.method == "POST" and not self.secret


def _drop_none(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


class ApiCalls:
    """Each method builds a Call and hands it to `_send` (blocking or awaitable)."""

    def _send(self, call: Call) -> Any:  # pragma: no cover - provided by the client classes
        raise NotImplementedError

    # --- allocations -----------------------------------------------------------------
    def allocate(
        self,
        gpu_count: int,
        *,
        gpu_model: str | None = None,
        lease_s: int | None = None,
        hold_id: str | None = None,
        use_holds: bool = True,
        command: list[str] | None = None,
        label: str | None = None,
        strategy: str | None = None,
        warmup: str | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        body = _drop_none(
            gpu_count=gpu_count,
            gpu_model=gpu_model,
            lease_s=lease_s,
            hold_id=hold_id,
            command=command,
            label=label,
            strategy=strategy,
            warmup=warmup,
        )
        body["use_holds"] = use_holds
        return self._send(
            Call(
                "POST",
                "/v1/allocations",
                Allocation.model_validate,
                body,
                idempotency_key=idempotency_key,
            )
        )

    def get_allocation(self, allocation_id: str) -> Any:
        return self._send(
            Call("GET", f"/v1/allocations/{allocation_id}", Allocation.model_validate)
        )

    def list_allocations(self, *, status: list[str] | None = None, limit: int = 100) -> Any:
        return self._send(
            Call(
                "GET",
                "/v1/allocations",
                _allocations.validate_python,
                params=_drop_none(status=status, limit=limit),
            )
        )

    def renew(self, allocation_id: str, *, lease_s: int | None = None) -> Any:
        """The allocation's lease now ends `lease_s` (default its own lease) from now."""
        return self._send(
            Call(
                "POST",
                f"/v1/allocations/{allocation_id}/renew",
                Allocation.model_validate,
                body=_drop_none(lease_s=lease_s),
            )
        )

    def release(self, allocation_id: str) -> Any:
        return self._send(
            Call("DELETE", f"/v1/allocations/{allocation_id}", Allocation.model_validate)
        )

    # --- holds -----------------------------------------------------------------------
    def hold(
        self,
        gpu_count: int,
        *,
        ttl_s: int,
        start_at: datetime | None = None,
        start_in_s: float | None = None,
        lead_s: int | None = None,
        confidence: float | None = None,
        gpu_model: str | None = None,
        warmup: str | None = None,
        source: str | None = None,
        label: str | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        body = _drop_none(
            gpu_count=gpu_count,
            ttl_s=ttl_s,
            start_at=start_at.isoformat() if start_at else None,
            start_in_s=start_in_s,
            lead_s=lead_s,
            confidence=confidence,
            gpu_model=gpu_model,
            warmup=warmup,
            source=source,
            label=label,
        )
        return self._send(
            Call("POST", "/v1/holds", Hold.model_validate, body, idempotency_key=idempotency_key)
        )

    def get_hold(self, hold_id: str) -> Any:
        return self._send(Call("GET", f"/v1/holds/{hold_id}", Hold.model_validate))

    def list_holds(self, *, status: list[str] | None = None, limit: int = 100) -> Any:
        return self._send(
            Call(
                "GET",
                "/v1/holds",
                _holds.validate_python,
                params=_drop_none(status=status, limit=limit),
            )
        )

    def cancel_hold(self, hold_id: str) -> Any:
        return self._send(Call("DELETE", f"/v1/holds/{hold_id}", Hold.model_validate))

    def claim(
        self,
        hold_id: str,
        *,
        gpu_count: int | None = None,
        lease_s: int | None = None,
        command: list[str] | None = None,
        label: str | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """Claim the hold; `gpu_count` takes only that many of its GPUs, releasing the rest."""
        body = _drop_none(gpu_count=gpu_count, lease_s=lease_s, command=command, label=label)
        return self._send(
            Call(
                "POST",
                f"/v1/holds/{hold_id}/claim",
                Allocation.model_validate,
                body,
                idempotency_key=idempotency_key,
            )
        )

    # --- admin -----------------------------------------------------------------------
    def create_tenant(
        self,
        name: str,
        *,
        quota_gpus: int,
        burst_gpus: int = 0,
        weight: float = 1.0,
        online_share: float | None = None,
    ) -> Any:
        body = {"name": name, "quota_gpus": quota_gpus, "burst_gpus": burst_gpus, "weight": weight}
        body.update(_drop_none(online_share=online_share))
        return self._send(Call("POST", "/v1/tenants", Tenant.model_validate, body))

    def list_tenants(self) -> Any:
        return self._send(Call("GET", "/v1/tenants", _tenants.validate_python))

    def create_api_key(self, tenant_id: str, *, label: str | None = None) -> Any:
        return self._send(
            Call(
                "POST",
                f"/v1/tenants/{tenant_id}/api-keys",
                ApiKeyCreated.model_validate,
                _drop_none(label=label),
                secret=True,
            )
        )

    # --- node identity (admin) -------------------------------------------------------
    def create_node_token(
        self,
        node_name: str,
        *,
        ttl_s: int | None = None,
        single_use: bool | None = None,
        label: str | None = None,
    ) -> Any:
        """An enrolment token (jge_...) for one node name."""
        body = _drop_none(node_name=node_name, ttl_s=ttl_s, single_use=single_use, label=label)
        return self._send(
            Call("POST", "/v1/node-tokens", EnrolTokenCreated.model_validate, body, secret=True)
        )

    def list_node_tokens(self) -> Any:
        return self._send(Call("GET", "/v1/node-tokens", _node_tokens.validate_python))

    def revoke_node_token(self, token_id: str) -> Any:
        """Revoke an enrolment token, or a node credential (which drains its node)."""
        return self._send(
            Call("DELETE", f"/v1/node-tokens/{token_id}", NodeTokenInfo.model_validate)
        )

    def enrol_node(self, name: str) -> Any:
        """Enrol a node with the admin token: its credential (jgn_...), shown once."""
        return self._send(
            Call(
                "POST",
                "/v1/nodes/enrol",
                NodeCredential.model_validate,
                {"name": name},
                secret=True,
            )
        )

    def rotate_node_credential(self, node_id: str) -> Any:
        """A new credential for the node now; the old one stops working."""
        return self._send(
            Call(
                "POST",
                f"/v1/nodes/{node_id}/credentials",
                NodeCredential.model_validate,
                secret=True,
            )
        )

    def request_rotation(self, node_id: str) -> Any:
        """Ask the node's agent to rotate its credential at its next heartbeat."""
        return self._send(
            Call("POST", f"/v1/nodes/{node_id}/rotate", RotationRequested.model_validate)
        )

    def move_gpu(self, gpu_uuid: str, node_id: str) -> Any:
        return self._send(
            Call("POST", f"/v1/gpus/{gpu_uuid}/move", Gpu.model_validate, {"node_id": node_id})
        )

    def get_policy(self, tenant_id: str) -> Any:
        return self._send(Call("GET", f"/v1/policies/{tenant_id}", TenantPolicyInfo.model_validate))

    def put_policy(self, tenant_id: str, **policy: Any) -> Any:
        return self._send(
            Call("PUT", f"/v1/policies/{tenant_id}", TenantPolicyInfo.model_validate, policy)
        )

    def list_nodes(self) -> Any:
        return self._send(Call("GET", "/v1/nodes", _nodes.validate_python))

    def list_gpus(self) -> Any:
        return self._send(Call("GET", "/v1/gpus", _gpus.validate_python))

    def events(self, *, after_id: int = 0, object_id: str | None = None, limit: int = 200) -> Any:
        return self._send(
            Call(
                "GET",
                "/v1/events",
                _events.validate_python,
                params=_drop_none(after_id=after_id, object_id=object_id, limit=limit),
            )
        )

    def whoami(self) -> Any:
        return self._send(Call("GET", "/v1/me", Tenant.model_validate))
