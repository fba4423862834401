"""`jitgpu admin ...`: tenants, API keys, node tokens, server-side policies, nodes and GPUs."""

from __future__ import annotations

import re
from typing import Any

import typer

from control_plane.schemas.tenants import TenantPolicy
from smart_agent.cli import node_tokens
from smart_agent.cli.common import (
    AdminTokenOpt,
    JsonOpt,
    ServerOpt,
    WideOpt,
    client,
    console,
    emit,
    fail,
)

ID = re.compile(r"^tnt_[0-9a-f]{16}$")

admin_app = typer.Typer(help="Administer the control plane (admin token).", no_args_is_help=True)
admin_app.add_typer(node_tokens.node_token_app, name="node-token")
admin_app.command("gpu-move")(node_tokens.gpu_move)

TENANT_COLUMNS = (
    ("id", lambda t: t.id),
    ("name", lambda t: t.name),
    ("quota", lambda t: t.quota_gpus),
    ("burst", lambda t: t.burst_gpus),
    ("weight", lambda t: t.weight),
)
NODE_COLUMNS = (
    ("id", lambda n: n.id),
    ("name", lambda n: n.name),
    ("status", lambda n: n.status.value),
    ("leaf", lambda n: f"{n.spine}/{n.leaf}"),
    ("gpus", lambda n: len(n.gpus)),
    ("in use", lambda n: sum(1 for g in n.gpus if g.assigned_to)),
    ("unhealthy", lambda n: sum(1 for g in n.gpus if not g.healthy)),
    ("last heartbeat", lambda n: n.last_heartbeat_at),
)


@admin_app.command("tenant-create")
def tenant_create(
    name: str,
    quota: int = typer.Option(..., "--quota", min=0),
    burst: int = typer.Option(0, "--burst", min=0),
    online_share: float | None = typer.Option(
        None,
        "--online-share",
        min=0.0,
        max=1.0,
        help="Share of the quota for online jobs, the rest for batch \\[default: no split].",
    ),
    with_key: bool = typer.Option(
        True, "--key/--no-key", help="Also mint an API key (shown once)."
    ),
    server: str | None = ServerOpt,
    token: str | None = AdminTokenOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Create a tenant (and, by default, its first API key)."""
    with client(server, token, admin=True) as c:
        tenant = c.create_tenant(
            name, quota_gpus=quota, burst_gpus=burst, online_share=online_share
        )
        key = c.create_api_key(tenant.id) if with_key else None
    emit(tenant, as_json=as_json, columns=TENANT_COLUMNS)
    if key is not None and not as_json:
        console.print(f"API key (shown once): [bold]{key.key}[/bold]")
    elif key is not None:
        print(key.model_dump_json())


@admin_app.command("key-create")
def key_create(
    tenant: str = typer.Argument(..., help="The tenant's id or name."),
    label: str | None = typer.Option(None),
    server: str | None = ServerOpt,
    token: str | None = AdminTokenOpt,
) -> None:
    """Mint an API key for a tenant; the secret is printed once (pipe it to `jitgpu login`)."""
    with client(server, token, admin=True) as c:
        tenant_id = tenant
        if not ID.match(tenant):
            named = [t.id for t in c.list_tenants() if t.name == tenant]
            if not named:
                fail(f"no tenant named {tenant!r}")
            tenant_id = named[0]
        print(c.create_api_key(tenant_id, label=label).key)


@admin_app.command("nodes")
def nodes(
    server: str | None = ServerOpt,
    token: str | None = AdminTokenOpt,
    as_json: bool = JsonOpt,
    wide: bool = WideOpt,
) -> None:
    """List nodes with their GPU counts and health."""
    with client(server, token, admin=True) as c:
        emit(c.list_nodes(), as_json=as_json, columns=NODE_COLUMNS, title="nodes", wide=wide)


@admin_app.command("policy-set")
def policy_set(
    tenant_id: str,
    max_held_gpus: int | None = typer.Option(None, min=0),
    max_idle_gpu_hours_per_day: float | None = typer.Option(None, min=0),
    max_hold_ttl_s: int | None = typer.Option(None, min=1),
    allowed_warmup: list[str] | None = typer.Option(
        None, "--allowed-warmup", help="Allow only these warm-up profiles (repeat the option)."
    ),
    any_warmup: bool = typer.Option(False, "--any-warmup", help="Allow every warm-up profile."),
    holds_may_preempt_holds: bool | None = typer.Option(
        None, "--holds-may-preempt-holds/--no-holds-may-preempt-holds"
    ),
    server: str | None = ServerOpt,
    token: str | None = AdminTokenOpt,
) -> None:
    """Change a tenant's server-side speculative budget; limits not given keep their value."""
    if allowed_warmup and any_warmup:
        raise typer.BadParameter("give --allowed-warmup or --any-warmup, not both")
    given: dict[str, Any] = {
        "max_held_gpus": max_held_gpus,
        "max_idle_gpu_hours_per_day": max_idle_gpu_hours_per_day,
        "max_hold_ttl_s": max_hold_ttl_s,
        "allowed_warmups": allowed_warmup or None,
        "holds_may_preempt_holds": holds_may_preempt_holds,
    }
    changes = {k: v for k, v in given.items() if v is not None}
    if any_warmup:
        changes["allowed_warmups"] = None
    if not changes:
        raise typer.BadParameter("nothing to change: give at least one limit")
    with client(server, token, admin=True) as c:
        # The server takes the whole policy: start from what is in force, so that a limit
        # left out is kept rather than reset to its default.
        current = c.get_policy(tenant_id)
        body = {name: getattr(current, name) for name in TenantPolicy.model_fields}
        info = c.put_policy(tenant_id, **{**body, **changes})
    print(info.model_dump_json(indent=2))
