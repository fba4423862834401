"""Prebuilt Core statements for the hot paths: built once, so each use skips the statement
construction and cache-key work that dominates a small transaction's Python time. `run`
goes further for the hottest: compiled once per database dialect, executed on the DB-API
cursor of the session's connection (SQLAlchemy's own execution costs more than SQLite)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Executable,
    Float,
    Integer,
    String,
    bindparam,
    case,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel import Session

from control_plane.db.models import (
    AllocationRow,
    ApiKeyRow,
    AssignmentRow,
    ClusterEpochRow,
    EventRow,
    GpuRow,
    HoldRow,
    NodeRow,
    TenantRow,
)
from control_plane.db.session import TxSession
from control_plane.schemas.enums import HoldStatus, JobClass


def const(value: str) -> ColumnElement[str]:
    """A state written into the SQL text, not bound: PostgreSQL plans a prepared statement
    once for any value of a bound parameter, and for a bound status that plan scans the
    whole table (half its rows are "any status"); with the state in the text it uses the
    index, whose rows of that state are few."""
    if not value.replace("_", "").isalnum():
        raise ValueError(f"not a state name: {value!r}")
    return literal_column(f"'{value}'", String)


def consts(values: Sequence[str]) -> list[ColumnElement[str]]:
    """`const` of each state, for an IN list."""
    return [const(v) for v in values]


ASSIGNMENT = AssignmentRow.__table__
EVENT = EventRow.__table__
EPOCH = ClusterEpochRow.__table__
TENANT = TenantRow.__table__
ALLOCATION = AllocationRow.__table__
HOLD = HoldRow.__table__
NODE = NodeRow.__table__
GPU = GpuRow.__table__
API_KEY = ApiKeyRow.__table__

INSERT_EVENT = insert(EVENT)
INSERT_ASSIGNMENT = insert(ASSIGNMENT)
INSERT_ALLOCATION = insert(ALLOCATION)

# The hot allocate and release read and end an allocation without loading an ORM object.
ALLOCATION_BY_ID = select(ALLOCATION).where(ALLOCATION.c.id == bindparam("id"))
END_ALLOCATION = (
    update(ALLOCATION)
    .where(ALLOCATION.c.id == bindparam("alloc"))
    .values(status=bindparam("to"), released_at=bindparam("at"), reason=bindparam("why"))
)

END_ALLOCATION_ASSIGNMENTS = (
    update(ASSIGNMENT)
    .where(ASSIGNMENT.c.ended_at.is_(None), ASSIGNMENT.c.allocation_id == bindparam("owner"))
    .values(ended_at=bindparam("now"))
    .returning(ASSIGNMENT.c.gpu_uuid, ASSIGNMENT.c.node_id)
)
# A client's release in statements that need nothing read first, so that on PostgreSQL they go
# in one round trip with the queue's read (`run_together`): the allocation released only if it
# is allocated and the caller's (`tenant` NULL: anyone's), returning its row; then its GPUs,
# only if it is released by now (an earlier release ended them already).
RELEASE_ALLOCATED = (
    update(ALLOCATION)
    .where(
        ALLOCATION.c.id == bindparam("alloc"),
        ALLOCATION.c.status == const("allocated"),
        ALLOCATION.c.tenant_id
        == func.coalesce(bindparam("tenant", type_=String), ALLOCATION.c.tenant_id),
    )
    .values(status=bindparam("to"), released_at=bindparam("at"), reason=bindparam("why"))
    .returning(*ALLOCATION.c)
)
END_RELEASED_ASSIGNMENTS = (
    update(ASSIGNMENT)
    .where(
        ASSIGNMENT.c.ended_at.is_(None),
        ASSIGNMENT.c.allocation_id == bindparam("owner"),
        select(ALLOCATION.c.id)
        .where(ALLOCATION.c.id == bindparam("owner"), ALLOCATION.c.status == const("released"))
        .exists(),
    )
    .values(ended_at=bindparam("now"))
    .returning(ASSIGNMENT.c.gpu_uuid, ASSIGNMENT.c.node_id)
)
END_HOLD_ASSIGNMENTS = (
    update(ASSIGNMENT)
    .where(ASSIGNMENT.c.ended_at.is_(None), ASSIGNMENT.c.hold_id == bindparam("owner"))
    .values(ended_at=bindparam("now"))
    .returning(ASSIGNMENT.c.gpu_uuid, ASSIGNMENT.c.node_id)
)
END_HOLD_GPU_ASSIGNMENTS = (
    update(ASSIGNMENT)
    .where(
        ASSIGNMENT.c.ended_at.is_(None),
        ASSIGNMENT.c.hold_id == bindparam("owner"),
        ASSIGNMENT.c.gpu_uuid.in_(bindparam("gpus", expanding=True)),
    )
    .values(ended_at=bindparam("now"))
    .returning(ASSIGNMENT.c.gpu_uuid, ASSIGNMENT.c.node_id)
)

# An allocation's GPUs, now and before (in assignment order): a node may report only on its
# own allocations, and a task report's answer shows them.
ALLOCATION_GPUS = (
    select(
        ASSIGNMENT.c.gpu_uuid, ASSIGNMENT.c.node_id, ASSIGNMENT.c.ended_at, ASSIGNMENT.c.started_at
    )
    .where(ASSIGNMENT.c.allocation_id == bindparam("owner"))
    .order_by(ASSIGNMENT.c.id)
)
# A task report, final or not, in one statement: its fields and, for a task's end, the
# allocation's (the caller decides them from the row it read).
TASK_REPORTED = (
    update(ALLOCATION)
    .where(ALLOCATION.c.id == bindparam("alloc"))
    .values(
        task_status=bindparam("task"),
        exit_code=bindparam("code"),
        output_tail=bindparam("tail"),
        status=bindparam("status"),
        released_at=bindparam("released"),
        reason=bindparam("why"),
    )
)

READ_EPOCH = select(EPOCH.c.value).where(EPOCH.c.id == 1)
BUMP_EPOCH = (
    update(EPOCH).where(EPOCH.c.id == 1).values(value=EPOCH.c.value + 1).returning(EPOCH.c.value)
)

READ_USAGE = select(TENANT.c.usage_gpu_s, TENANT.c.usage_at).where(
    TENANT.c.id == bindparam("tenant")
)
WRITE_USAGE = (
    update(TENANT)
    .where(TENANT.c.id == bindparam("tenant"))
    .values(usage_gpu_s=bindparam("value"), usage_at=bindparam("at"))
)

# A charge to the decayed usage in one statement that nobody reads (`DecayedUsage.charge`
# written in SQL): on PostgreSQL it travels with the next statement instead of costing a
# read's round trip on every release and task end. SQLite gets `power` from the db layer.
_AT = TENANT.c.usage_at
_NOW = bindparam("now", type_=Float)
CHARGE_USAGE = (
    update(TENANT)
    .where(TENANT.c.id == bindparam("tenant"))
    .values(
        usage_gpu_s=case(
            (
                (_NOW > _AT) & (TENANT.c.usage_gpu_s != 0),
                TENANT.c.usage_gpu_s
                * func.power(0.5, (_NOW - _AT) / bindparam("half_life", type_=Float)),
            ),
            else_=TENANT.c.usage_gpu_s,
        )
        + bindparam("gpu_s", type_=Float),
        usage_at=case((_NOW > _AT, _NOW), else_=_AT),
    )
)

# What a tenant runs: the quota limits these, not what waits in the queue.
ALLOCATED_BY_CLASS = (
    select(ALLOCATION.c.job_class, func.sum(ALLOCATION.c.gpu_count))
    .where(ALLOCATION.c.tenant_id == bindparam("tenant"), ALLOCATION.c.status == const("allocated"))
    .group_by(ALLOCATION.c.job_class)
)
_OWN = ALLOCATION.c.tenant_id == TENANT.c.id


def _running(job_class: str) -> Any:
    return (
        select(func.coalesce(func.sum(ALLOCATION.c.gpu_count), 0))
        .where(
            _OWN,
            ALLOCATION.c.status == const("allocated"),
            ALLOCATION.c.job_class == const(job_class),
        )
        .scalar_subquery()
    )


# A tenant's claimable holds of one shape (every allocation request with `use_holds` asks;
# most find none, which admission's read already says: `claimable`).
CLAIMABLE_HOLD_STATUSES = (HoldStatus.PLACED, HoldStatus.WARMING, HoldStatus.READY)
_MODEL = bindparam("model", type_=String)
_WARMUP = bindparam("warmup", type_=String)


def _claimable(tenant: Any) -> tuple[Any, ...]:
    return (
        HOLD.c.tenant_id == tenant,
        or_(*(HOLD.c.status == const(s.value) for s in CLAIMABLE_HOLD_STATUSES)),
        HOLD.c.gpu_count == bindparam("count", type_=Integer),
        HOLD.c.expires_at > bindparam("now", type_=Float),
        or_(_MODEL.is_(None), HOLD.c.gpu_model == _MODEL),
        or_(_WARMUP.is_(None), HOLD.c.warmup == _WARMUP),
    )


CLAIMABLE_HOLDS = select(HOLD.c.id, HOLD.c.status, HOLD.c.created_at).where(
    *_claimable(bindparam("tenant"))
)
# Admission's reads in one statement: the tenant, its waiting count, its running GPUs by
# class, and whether a hold of the request's shape waits to be claimed (`count` None: the
# request does not look for one).
TENANT_ADMISSION = select(
    TENANT,
    select(func.count())
    .where(_OWN, ALLOCATION.c.status == const("pending"))
    .scalar_subquery()
    .label("queued"),
    _running(JobClass.ONLINE.value).label("online_gpus"),
    _running(JobClass.BATCH.value).label("batch_gpus"),
    select(HOLD.c.id).where(*_claimable(TENANT.c.id)).exists().label("claimable"),
).where(TENANT.c.id == bindparam("id"))
# The queue's reads and its common write (every release and task exit asks whether a request
# waits): per tenant, its limits and share, whether it has requests waiting and the GPUs it
# runs (index seeks per tenant: a scan of the waiting requests would grow with the queue);
# the head of a tenant's queue; a queued request placed on free GPUs.
_WAITING = select(ALLOCATION.c.id).where(_OWN, ALLOCATION.c.status == const("pending")).exists()
QUEUE_TENANTS = select(
    TENANT.c.id,
    TENANT.c.quota_gpus,
    TENANT.c.burst_gpus,
    TENANT.c.online_share,
    TENANT.c.weight,
    TENANT.c.usage_gpu_s,
    TENANT.c.usage_at,
    _WAITING.label("waiting"),
    # Summed only for a tenant with requests waiting: most releases find none.
    case(
        (
            _WAITING,
            select(func.coalesce(func.sum(ALLOCATION.c.gpu_count), 0))
            .where(_OWN, ALLOCATION.c.status == const("allocated"))
            .scalar_subquery(),
        ),
        else_=0,
    ).label("allocated"),
)
QUEUE_HEAD = (
    select(ALLOCATION)
    .where(ALLOCATION.c.tenant_id == bindparam("tenant"), ALLOCATION.c.status == const("pending"))
    .order_by(ALLOCATION.c.requested_at, ALLOCATION.c.id)
    .limit(bindparam("n"))
)
PLACE_QUEUED = (
    update(ALLOCATION)
    .where(ALLOCATION.c.id == bindparam("alloc"))
    .values(
        status="allocated",
        allocated_at=bindparam("at"),
        ready_at=bindparam("ready"),
        expires_at=bindparam("expires"),
        reason=bindparam("why"),
    )
)

# The heartbeat's read path: the node's state without its stored telemetry, its GPUs' health,
# and what the node must keep.
NODE_STATE = select(NODE.c.status, NODE.c.drain_requested_at, NODE.c.rotate_requested_at).where(
    NODE.c.id == bindparam("node")
)
# Every request whose key is not cached (a node's heartbeat, commonly: its key's cache entry
# lasts about one heartbeat interval) looks its key up by hash.
API_KEY_BY_HASH = select(
    API_KEY.c.id, API_KEY.c.scope, API_KEY.c.tenant_id, API_KEY.c.node_id, API_KEY.c.revoked_at
).where(API_KEY.c.key_hash == bindparam("hash"))
NODE_GPU_HEALTH = select(GPU.c.uuid, GPU.c.healthy).where(GPU.c.node_id == bindparam("node"))
# In the order the GPUs were assigned (a read folded with others names it: `beatread`).
NODE_ASSIGNMENTS_ORDER = ASSIGNMENT.c.id
NODE_ASSIGNMENTS = (
    select(ASSIGNMENT.c.gpu_uuid, ASSIGNMENT.c.hold_id, ASSIGNMENT.c.allocation_id)
    .where(ASSIGNMENT.c.node_id == bindparam("node"), ASSIGNMENT.c.ended_at.is_(None))
    .order_by(NODE_ASSIGNMENTS_ORDER)
)
# What a node's desired state shows of its holds and allocations, by node (one row per GPU):
# every heartbeat and work poll of a busy node reads them.
_ON_NODE = (ASSIGNMENT.c.node_id == bindparam("node"), ASSIGNMENT.c.ended_at.is_(None))
NODE_HOLDS = (
    select(
        HOLD.c.id,
        HOLD.c.status,
        HOLD.c.warmup,
        HOLD.c.expires_at,
        HOLD.c.start_at,
        TENANT.c.name,
    )
    .select_from(
        ASSIGNMENT.join(HOLD, HOLD.c.id == ASSIGNMENT.c.hold_id).join(
            TENANT, TENANT.c.id == HOLD.c.tenant_id
        )
    )
    .where(*_ON_NODE, ASSIGNMENT.c.allocation_id.is_(None))
)
NODE_ALLOCATIONS = (
    select(
        ALLOCATION.c.id,
        ALLOCATION.c.status,
        ALLOCATION.c.command_json,
        ALLOCATION.c.task_status,
        ALLOCATION.c.warmup,
        ALLOCATION.c.ready_at,
        ALLOCATION.c.expires_at,
        ALLOCATION.c.hold_id,
    )
    .select_from(ASSIGNMENT.join(ALLOCATION, ALLOCATION.c.id == ASSIGNMENT.c.allocation_id))
    .where(*_ON_NODE)
)


COMMAND_SAVEPOINT = "jitgpu_command"

# (statement, dialect, insert columns) -> (SQL text, literal parameters, positional names)
_Compiled = tuple[str, dict[str, Any], Sequence[str] | None]
_COMPILED: dict[tuple[Executable, str, tuple[str, ...] | None], _Compiled] = {}


def _compile(statement: Executable, dialect: Dialect, keys: tuple[str, ...] | None) -> _Compiled:
    cache_key = (statement, dialect.name, keys)
    found = _COMPILED.get(cache_key)
    if found is None:
        compiled = statement.compile(  # type: ignore[attr-defined]
            dialect=dialect, column_keys=list(keys) if keys is not None else None
        )
        literals = {k: v for k, v in compiled.params.items() if v is not None}
        found = (compiled.string, literals, compiled.positiontup if dialect.positional else None)
        _COMPILED[cache_key] = found
    return found


def _tx(session: Session) -> TxSession:
    if not isinstance(session, TxSession):
        raise TypeError("prebuilt statements run in a session of Database")
    return session


def run(
    session: Session,
    statement: Executable,
    params: Mapping[str, Any] | list[Mapping[str, Any]] | None = None,
) -> Any:
    """Execute a prebuilt statement (no expanding parameters) on the DB-API cursor of the
    session's connection, in its transaction; the cursor, to fetch from. A list of parameter
    sets runs as one executemany. Database errors come out as SQLAlchemy's exceptions (an
    IntegrityError from the unique index, an OperationalError from a lost server)."""
    tx, text, values, many = _prepare(session, statement, params)
    return tx.run_raw(text, values, many=many)


def run_together(
    session: Session,
    statements: Sequence[tuple[Executable, Mapping[str, Any] | None]],
) -> list[tuple[list[str], list[Any]]]:
    """Execute prebuilt statements in order, in one round trip on PostgreSQL (with the
    held-back writes before them): each one's column names and rows. For statements whose
    parameters do not depend on each other's results."""
    tx = _tx(session)
    prepared = [_prepare(session, statement, params)[1:3] for statement, params in statements]
    return tx.run_raw_together(prepared)


def send(
    session: Session,
    statement: Executable,
    params: Mapping[str, Any] | list[Mapping[str, Any]] | None = None,
) -> None:
    """`run` for a write whose result nobody reads. On PostgreSQL it travels with the
    session's next statement, in one round trip (`TxSession.defer_raw`); its errors (the
    unique index's) come out of that statement, still inside the same command's savepoint."""
    tx, text, values, many = _prepare(session, statement, params)
    tx.defer_raw(text, values, many=many)


def _prepare(
    session: Session,
    statement: Executable,
    params: Mapping[str, Any] | list[Mapping[str, Any]] | None,
) -> tuple[TxSession, str, Any, bool]:
    """The session, SQL text and DB-API parameters of a prebuilt statement (compiled once per
    dialect and set of insert columns). Kept to one call: it runs for every hot statement."""
    if not isinstance(session, TxSession):
        raise TypeError("prebuilt statements run in a session of Database")
    many = isinstance(params, list)
    first: Mapping[str, Any] = (params[0] if params else {}) if many else (params or {})  # type: ignore[index,assignment]
    keys = tuple(first) if isinstance(statement, Insert) else None
    text, literals, positions = _compile(statement, session.dialect, keys)
    if many:
        return session, text, [_bound(p, literals, positions) for p in params], True  # type: ignore[union-attr]
    if literals:
        first = {**literals, **first}
    if positions is not None:
        return session, text, tuple(first[n] for n in positions), False
    return session, text, first, False


def _bound(
    values: Mapping[str, Any], literals: dict[str, Any], positions: Sequence[str] | None
) -> Any:
    merged = {**literals, **values} if literals else values
    return tuple(merged[n] for n in positions) if positions is not None else merged


def savepoint(session: Session, verb: str) -> None:
    """SAVEPOINT, RELEASE SAVEPOINT or ROLLBACK TO SAVEPOINT of the command savepoint, at once
    on the connection. SQLite's commands run in one; on PostgreSQL a command has none (the
    writer's `_apply_pipelined`). The caller keeps the ORM session in step (see the writer)."""
    _tx(session).run_raw(f"{verb} {COMMAND_SAVEPOINT}", None)


def undo_command(session: Session) -> None:
    """Undo the command since its savepoint, and release it."""
    savepoint(session, "ROLLBACK TO SAVEPOINT")
    savepoint(session, "RELEASE SAVEPOINT")


def command_session(session: Session) -> TxSession:
    """The session of a batch: whether it holds writes back (PostgreSQL), and what each
    command changed there."""
    return _tx(session)


def prepared(session: Session, statement: Executable) -> tuple[str, Any]:
    """The SQL text and DB-API parameters of a prebuilt statement without parameters, for the
    session to run where it chooses (`TxSession.commit_with`)."""
    _, text, values, _ = _prepare(session, statement, None)
    return text, values


def row(session: Session, statement: Executable, params: Mapping[str, Any]) -> dict | None:
    """The first row of a query as a dict of its columns, or None."""
    cursor = run(session, statement, params)
    found = cursor.fetchone()
    if found is None:
        return None
    return dict(zip((d[0] for d in cursor.description), found, strict=True))
