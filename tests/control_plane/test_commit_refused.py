"""PostgreSQL write transactions send their own COMMIT: a COMMIT the database refuses runs the
batch again command by command, and a failure after the database committed neither undoes nor
repeats the batch. A tenant's new limits wait for the batch in progress, which may reuse the
tenant's read."""

from __future__ import annotations

import logging
import threading

import pytest
from sqlalchemy import event, text
from sqlmodel import Session

from control_plane.db.engine import PLACEMENT_LOCK_KEY, Database
from control_plane.schemas.tenants import TenantUpdate
from control_plane.services import tenants
from control_plane.services.writer import Command
from tests.control_plane.conftest import Api, allocate, counts

# A trigger checked at COMMIT (deferred) that refuses the first transaction to insert an
# allocation. The sequence is outside transactions, so the refusal is spent even though the
# refused transaction rolls back.
_REFUSE_FIRST_COMMIT = [
    "CREATE SEQUENCE commit_refusals",
    """CREATE FUNCTION refuse_first_commit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF nextval('commit_refusals') = 1 THEN
            RAISE EXCEPTION 'commit refused by the test trigger';
        END IF;
        RETURN NULL;
    END $$""",
    """CREATE CONSTRAINT TRIGGER refuse_first_commit AFTER INSERT ON allocation
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_first_commit()""",
]


# The database fixtures of tests/conftest.py, PostgreSQL only (skipped without its binaries
# unless JITGPU_REQUIRE_POSTGRES=1).
pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def test_a_refused_commit_runs_the_batch_again_one_by_one(
    api: Api, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    api.node("n1", gpus=8)
    tenant_id, _ = api.tenant(quota=8)
    with db.engine.begin() as connection:
        for statement in _REFUSE_FIRST_COMMIT:
            connection.execute(text(statement))
    batch = [Command(use_case=allocate(tenant_id)) for _ in range(3)]
    with caplog.at_level(logging.WARNING):
        api.writer.apply_batch(batch)
    # The COMMIT itself failed (the trigger runs only there), and the writer went one by one.
    assert any(
        "group commit of 3 commands failed" in r.getMessage() and "commit refused" in r.getMessage()
        for r in caplog.records
    )
    assert [c.answer.result()[0] for c in batch] == [201, 201, 201]
    # Nothing of the refused transaction stayed: three allocations, each on its own GPU.
    assert counts(db) == (3, 3)


def test_a_failure_after_the_commit_answers_the_batch_as_committed(
    api: Api, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    api.node("n1", gpus=8)
    tenant_id, _ = api.tenant(quota=8)
    failures: list[int] = []

    def fail_after_commit(session: Session) -> None:
        # SQLAlchemy ends its transaction after the session's own COMMIT went through.
        if not failures and not session.in_nested_transaction():
            failures.append(1)
            raise RuntimeError("failed after the commit")

    batch = [Command(use_case=allocate(tenant_id)) for _ in range(3)]
    event.listen(Session, "before_commit", fail_after_commit)
    try:
        with caplog.at_level(logging.WARNING):
            api.writer.apply_batch(batch)
    finally:
        event.remove(Session, "before_commit", fail_after_commit)
    assert failures == [1]
    assert [c.answer.result()[0] for c in batch] == [201, 201, 201]
    # Committed once, not run again: no warning of a failed group commit, three allocations.
    assert not any("group commit" in r.getMessage() for r in caplog.records)
    assert any("after a commit" in r.getMessage() for r in caplog.records)
    assert counts(db) == (3, 3)


def test_a_quota_change_waits_for_the_batch_in_progress(api: Api, db: Database) -> None:
    tenant_id, _ = api.tenant(quota=8)
    done = threading.Event()
    # A batch in progress holds the placement lock for its whole transaction.
    with db.engine.connect() as batch:
        batch.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PLACEMENT_LOCK_KEY})

        def change() -> None:
            tenants.update_tenant(db, tenant_id=tenant_id, body=TenantUpdate(quota_gpus=2))
            done.set()

        worker = threading.Thread(target=change)
        worker.start()
        assert not done.wait(0.5)  # a bounded wait for something that must not happen
        batch.rollback()  # the batch ends
    assert done.wait(10)
    worker.join()
    assert tenants.get_tenant(db, tenant_id=tenant_id).quota_gpus == 2
