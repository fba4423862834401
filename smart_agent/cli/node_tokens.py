"""`jitgpu admin node-token ...` and `gpu-move`: enrol, list, rotate and revoke node identities."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from control_plane.schemas.node_identity import NodeCredential
from smart_agent.cli.common import AdminTokenOpt, JsonOpt, ServerOpt, client, console, emit

node_token_app = typer.Typer(
    help="Node enrolment tokens and node credentials (admin token).", no_args_is_help=True
)

TOKEN_COLUMNS = (
    ("id", lambda t: t.id),
    ("kind", lambda t: t.kind),
    ("node", lambda t: t.node_name),
    ("node id", lambda t: t.node_id),
    ("prefix", lambda t: t.prefix),
    ("created", lambda t: t.created_at),
    ("expires", lambda t: t.expires_at),
    ("used", lambda t: t.used_at),
    ("revoked", lambda t: t.revoked_at),
)
OutOpt = typer.Option(
    None,
    "--out",
    help="Write the node's credential file here (mode 0600); copy it to the node's state_dir "
    "as credential-NAME.json.",
)


def write_credential(path: Path, credential: NodeCredential, server: str | None) -> None:
    """The node agent's credential file, readable by its owner only from the first byte."""
    data = {
        "node_id": credential.node_id,
        "name": credential.name,
        "credential": credential.credential,
        "server": server,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps(data, indent=2) + "\n")
    os.chmod(path, 0o600)  # the file may have existed with a wider mode


@node_token_app.command("create")
def create(
    node_name: str,
    ttl: int = typer.Option(3600, "--ttl", min=1, help="Seconds the token stays valid."),
    multi_use: bool = typer.Option(
        False, "--multi-use", help="Allow more than one enrolment until it expires."
    ),
    label: str | None = typer.Option(None),
    server: str | None = ServerOpt,
    token: str | None = AdminTokenOpt,
) -> None:
    """Issue an enrolment token for NODE_NAME (give it to the node as JITGPU_ENROL_TOKEN)."""
    with client(server, token, admin=True) as c:
        made = c.create_node_token(node_name, ttl_s=ttl, single_use=not multi_use, label=label)
    print(made.key)


@node_token_app.command("list")
def list_tokens(
    server: str | None = ServerOpt, token: str | None = AdminTokenOpt, as_json: bool = JsonOpt
) -> None:
    """Enrolment tokens and node credentials, without their secrets."""
    with client(server, token, admin=True) as c:
        emit(c.list_node_tokens(), as_json=as_json, columns=TOKEN_COLUMNS, title="node tokens")


@node_token_app.command("revoke")
def revoke(
    token_id: str,
    server: str | None = ServerOpt,
    token: str | None = AdminTokenOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Revoke an enrolment token, or a node credential: its node is drained at once."""
    with client(server, token, admin=True) as c:
        emit(c.revoke_node_token(token_id), as_json=as_json, columns=TOKEN_COLUMNS)


@node_token_app.command("enrol")
def enrol(
    node_name: str,
    out: Path = typer.Option(..., "--out", help=OutOpt.help),
    server: str | None = ServerOpt,
    token: str | None = AdminTokenOpt,
) -> None:
    """Enrol NODE_NAME with the admin token and write its credential file (never printed)."""
    with client(server, token, admin=True) as c:
        credential = c.enrol_node(node_name)
        write_credential(out, credential, c.server)
    console.print(f"node {credential.name} ({credential.node_id}): credential written to {out}")


@node_token_app.command("rotate")
def rotate(
    node_id: str,
    now: bool = typer.Option(
        False, "--now", help="Issue the new credential here (needs --out) instead of the agent."
    ),
    out: Path | None = OutOpt,
    server: str | None = ServerOpt,
    token: str | None = AdminTokenOpt,
) -> None:
    """Rotate a node's credential: by its agent at its next heartbeat, or here with --now."""
    if now and out is None:
        raise typer.BadParameter("--now writes the new credential to a file: give --out FILE")
    with client(server, token, admin=True) as c:
        if not now:
            asked = c.request_rotation(node_id)
            console.print(f"node {asked.node_id} rotates its credential at its next heartbeat")
            return
        credential = c.rotate_node_credential(node_id)
        assert out is not None
        write_credential(out, credential, c.server)
    console.print(f"node {credential.node_id}: new credential written to {out}; the old is void")


def gpu_move(
    gpu_uuid: str,
    node_id: str,
    server: str | None = ServerOpt,
    token: str | None = AdminTokenOpt,
) -> None:
    """Give GPU_UUID to NODE_ID; what held it on its old node ends (holds fail, jobs lost)."""
    with client(server, token, admin=True) as c:
        gpu = c.move_gpu(gpu_uuid, node_id)
    console.print(f"GPU {gpu.uuid} now belongs to node {gpu.node} ({gpu.node_id})")
