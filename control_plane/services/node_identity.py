"""Node identity: enrolment tokens, per-node credentials, rotation and revocation."""

from __future__ import annotations

import hmac
import secrets

from sqlmodel import Session, col, select

from control_plane.db.engine import Database
from control_plane.db.models import ApiKeyRow, EnrolTokenRow, NodeRow
from control_plane.schemas.common import utc_from_epoch
from control_plane.schemas.enums import Scope
from control_plane.schemas.node_identity import (
    EnrolTokenCreate,
    EnrolTokenCreated,
    NodeCredential,
    NodeEnrol,
    NodeTokenInfo,
    RotationRequested,
)
from control_plane.schemas.nodes import NodeRegister
from control_plane.services import nodes
from control_plane.services.auth import hash_key, mint_key
from control_plane.services.errors import Forbidden, NotFound, Unauthenticated
from control_plane.services.events import record
from control_plane.services.ids import new_id

ENROL_PREFIX = "jge_"
REVOKED_DRAIN = "drained: its node credential was revoked"
# One message for every token that cannot enrol: a caller learns nothing about which.
BAD_ENROL = "unknown, used, expired or revoked enrolment token"


class WrongNode(Forbidden):
    code = "wrong_node"


def create_enrol_token(db: Database, *, body: EnrolTokenCreate, now: float) -> EnrolTokenCreated:
    secret = ENROL_PREFIX + secrets.token_urlsafe(32)
    row = EnrolTokenRow(
        id=new_id("enr"),
        token_hash=hash_key(secret),
        prefix=secret[:10],
        node_name=body.node_name,
        label=body.label,
        single_use=body.single_use,
        created_at=now,
        expires_at=now + body.ttl_s,
    )
    with db.write() as session:
        session.add(row)
    return EnrolTokenCreated(
        id=row.id,
        key=secret,
        prefix=row.prefix,
        node_name=row.node_name,
        single_use=row.single_use,
        label=row.label,
        created_at=utc_from_epoch(row.created_at),
        expires_at=utc_from_epoch(row.expires_at),
    )


def _enrol_info(row: EnrolTokenRow) -> NodeTokenInfo:
    return NodeTokenInfo(
        id=row.id,
        kind="enrolment",
        prefix=row.prefix,
        node_name=row.node_name,
        node_id=None,
        label=row.label,
        created_at=utc_from_epoch(row.created_at),
        expires_at=utc_from_epoch(row.expires_at),
        used_at=utc_from_epoch(row.used_at),
        revoked_at=utc_from_epoch(row.revoked_at),
    )


def _credential_info(row: ApiKeyRow, names: dict[str, str]) -> NodeTokenInfo:
    return NodeTokenInfo(
        id=row.id,
        kind="credential",
        prefix=row.prefix,
        node_name=names.get(row.node_id) if row.node_id else None,
        node_id=row.node_id,
        label=row.label,
        created_at=utc_from_epoch(row.created_at),
        revoked_at=utc_from_epoch(row.revoked_at),
    )


def list_node_tokens(db: Database) -> list[NodeTokenInfo]:
    with db.read() as session:
        names = {n.id: n.name for n in session.exec(select(NodeRow)).all()}
        creds = session.exec(
            select(ApiKeyRow)
            .where(ApiKeyRow.scope == Scope.NODE.value)
            .order_by(col(ApiKeyRow.created_at))
        ).all()
        enrols = session.exec(select(EnrolTokenRow).order_by(col(EnrolTokenRow.created_at))).all()
        out = [_enrol_info(r) for r in enrols] + [_credential_info(r, names) for r in creds]
    return sorted(out, key=lambda i: i.created_at)


def revoke(db: Database, *, token_id: str, now: float) -> NodeTokenInfo:
    """Revoke an enrolment token, or a node credential: then its node is drained too."""
    with db.write(placement=True) as session:
        enrol = session.get(EnrolTokenRow, token_id)
        if enrol is not None:
            if enrol.revoked_at is None:
                enrol.revoked_at = now
                record(
                    session,
                    kind="enrol_token",
                    object_id=enrol.id,
                    to_state="revoked",
                    at=now,
                    reason=f"enrolment token for node {enrol.node_name} ({enrol.prefix})",
                )
            return _enrol_info(enrol)
        row = session.get(ApiKeyRow, token_id)
        if row is None or row.scope != Scope.NODE.value:
            raise NotFound(f"node token {token_id} not found")
        names: dict[str, str] = {}
        if row.revoked_at is None:
            row.revoked_at = now
            record(
                session,
                kind="node_credential",
                object_id=row.node_id or row.id,
                to_state="revoked",
                at=now,
                reason=f"revoked by an administrator ({row.prefix})",
            )
            node = session.get(NodeRow, row.node_id) if row.node_id else None
            if node is not None:
                names[node.id] = node.name
                # An enrolment token still open for the node would undo the revocation.
                for enrol_row in session.exec(
                    select(EnrolTokenRow).where(
                        EnrolTokenRow.node_name == node.name,
                        col(EnrolTokenRow.revoked_at).is_(None),
                    )
                ).all():
                    enrol_row.revoked_at = now
                # Nothing new goes to a node nobody can vouch for; what runs there goes on
                # until it re-enrols or goes silent.
                nodes.drain_in(session, node, drain=True, now=now, reason=REVOKED_DRAIN)
        session.flush()
        return _credential_info(row, names)


def enrol(
    db: Database, *, token: str, admin_token: str | None, body: NodeEnrol, now: float
) -> NodeCredential:
    """Trade an enrolment token (or the admin token) for a credential bound to one node."""
    is_admin = bool(admin_token) and hmac.compare_digest(token.encode(), admin_token.encode())
    with db.write() as session:
        if not is_admin:
            _check_enrol_token(session, token=token, name=body.name, now=now)
        node = session.exec(select(NodeRow).where(NodeRow.name == body.name)).first()
        if node is None:
            # The node exists from now on, so that its credential can name it; it comes
            # online when its agent registers its GPUs.
            # Placed where registration puts a node that names no spine or leaf.
            where = NodeRegister.model_fields
            node = nodes.new_node(
                session,
                name=body.name,
                spine=where["spine"].default,
                leaf=where["leaf"].default,
                now=now,
                why="enrolled",
            )
            session.flush()
        return _issue(session, node, now=now, reason="enrolled")


def _check_enrol_token(session: Session, *, token: str, name: str, now: float) -> None:
    digest = hash_key(token)
    row = session.exec(select(EnrolTokenRow).where(EnrolTokenRow.token_hash == digest)).first()
    if row is not None:
        spent = row.single_use and row.used_at is not None
        if row.revoked_at is not None or spent or now >= row.expires_at:
            raise Unauthenticated(BAD_ENROL)
        if row.node_name != name:
            raise WrongNode(
                f"this enrolment token enrols node {row.node_name!r}, not {name!r}", field="name"
            )
        row.used_at = now
        return
    key = session.exec(select(ApiKeyRow).where(ApiKeyRow.key_hash == digest)).first()
    if key is None or key.revoked_at is not None:
        raise Unauthenticated(BAD_ENROL)
    if key.scope != Scope.NODE.value or key.node_id is not None:
        raise Forbidden(
            f"a {key.scope} key cannot enrol a node; use an enrolment token or the admin token"
        )
    # A node token from before node identity enrols a node only once: the upgrade path for
    # agents that hold one. A node that has a credential needs a new enrolment token.
    node = session.exec(select(NodeRow).where(NodeRow.name == name)).first()
    if node is not None and _live_credentials(session, node.id):
        raise Forbidden(
            f"node {name!r} is enrolled already; an administrator issues an enrolment token "
            "to enrol it again",
            code="already_enrolled",
        )


def _live_credentials(session: Session, node_id: str) -> list[ApiKeyRow]:
    return list(
        session.exec(
            select(ApiKeyRow).where(
                ApiKeyRow.node_id == node_id, col(ApiKeyRow.revoked_at).is_(None)
            )
        ).all()
    )


def _issue(session: Session, node: NodeRow, *, now: float, reason: str) -> NodeCredential:
    # One live credential per node: a new one ends the old, so a copy left behind is useless.
    for old in _live_credentials(session, node.id):
        old.revoked_at = now
    node.rotate_requested_at = None
    row, secret = mint_key(
        session, scope=Scope.NODE, tenant_id=None, label=reason, now=now, node_id=node.id
    )
    record(
        session,
        kind="node_credential",
        object_id=node.id,
        to_state="issued",
        at=now,
        reason=f"{reason} ({row.prefix})",
    )
    return NodeCredential(
        node_id=node.id,
        name=node.name,
        credential_id=row.id,
        credential=secret,
        prefix=row.prefix,
        created_at=utc_from_epoch(now),
    )


def rotate(db: Database, *, node_id: str, now: float) -> NodeCredential:
    """A new credential for the node; the one it had stops working at once."""
    with db.write() as session:
        node = session.get(NodeRow, node_id)
        if node is None:
            raise NotFound(f"node {node_id} not found")
        return _issue(session, node, now=now, reason="rotated")


def request_rotation(db: Database, *, node_id: str, now: float) -> RotationRequested:
    """Ask the node's agent to rotate: its next heartbeat reply carries rotate_credential."""
    with db.write() as session:
        node = session.get(NodeRow, node_id)
        if node is None:
            raise NotFound(f"node {node_id} not found")
        if node.rotate_requested_at is None:
            node.rotate_requested_at = now
        return RotationRequested(
            node_id=node.id, rotate_requested_at=utc_from_epoch(node.rotate_requested_at)
        )
