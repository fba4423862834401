"""Run a creating use case once per Idempotency-Key: same key and body, same answer, one effect."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, delete, select

from control_plane.db.engine import Database
from control_plane.db.models import IdempotencyRow
from control_plane.services.errors import Conflict, Invalid

MAX_KEY_LEN = 128
RETRIES = 3

UseCase = Callable[[Session, float], tuple[int, BaseModel]]


def request_hash(method: str, path: str, body: BaseModel) -> str:
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{method} {path}\n{canonical}".encode()).hexdigest()


def check_key(key: str | None) -> None:
    """Refuse (422) a key of the wrong length, before any work is queued for it."""
    if key is not None and not (0 < len(key) <= MAX_KEY_LEN):
        raise Invalid(
            f"Idempotency-Key must be 1 to {MAX_KEY_LEN} characters", field="Idempotency-Key"
        )


def apply(
    session: Session,
    *,
    owner: str,
    key: str | None,
    digest: str,
    clock: Callable[[], float],
    use_case: UseCase,
) -> tuple[int, str]:
    """Inside the caller's write transaction: the stored answer for the key, else run the use
    case and store its answer with its effect; the status and the answer as JSON text."""
    if key is not None:
        prior = session.exec(
            select(IdempotencyRow).where(
                IdempotencyRow.principal == owner, IdempotencyRow.key == key
            )
        ).first()
        if prior is not None:
            if prior.request_hash != digest:
                raise Conflict(
                    "this Idempotency-Key was used with a different request",
                    code="idempotency_key_reused",
                    field="Idempotency-Key",
                )
            return prior.status_code, prior.body
    # Read the clock once the lock is held, so that times follow commit order.
    now = clock()
    status, model = use_case(session, now)
    # pydantic's own serializer, once: the text is both the answer and the record.
    body = model.model_dump_json()
    if key is not None:
        session.add(
            IdempotencyRow(
                principal=owner,
                key=key,
                request_hash=digest,
                status_code=status,
                body=body,
                created_at=now,
            )
        )
    return status, body


def run(
    db: Database,
    *,
    owner: str,
    key: str | None,
    fingerprint: Callable[[], str],
    clock: Callable[[], float],
    use_case: UseCase,
    placement: bool = True,
) -> tuple[int, str]:
    """One transaction of its own: `apply`, retried when a concurrent twin wins the key.

    The stored answer commits with the effect, so a crash can never leave one without the
    other. A concurrent twin loses on the unique (owner, key) index and then reads the
    winner's answer on its retry. `fingerprint` (the request's hash) is computed only when
    a key is given: a request without one has nothing to compare it with.
    """
    check_key(key)
    digest = fingerprint() if key is not None else ""
    return run_digested(
        db,
        owner=owner,
        key=key,
        digest=digest,
        clock=clock,
        use_case=use_case,
        placement=placement,
    )


def run_digested(
    db: Database,
    *,
    owner: str,
    key: str | None,
    digest: str,
    clock: Callable[[], float],
    use_case: UseCase,
    placement: bool = True,
) -> tuple[int, str]:
    """`run` for a request whose key was checked and hashed already."""
    for attempt in range(RETRIES):
        try:
            with db.write(placement=placement) as session:
                return apply(
                    session, owner=owner, key=key, digest=digest, clock=clock, use_case=use_case
                )
        except IntegrityError:
            if attempt == RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def prune(db: Database, *, older_than: float) -> int:
    with db.write() as session:
        result = session.execute(
            delete(IdempotencyRow).where(col(IdempotencyRow.created_at) < older_than)
        )
        return int(result.rowcount or 0)
