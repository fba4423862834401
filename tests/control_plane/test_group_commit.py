"""The group-commit writer: one transaction per batch, a failing command undone alone, answers
only after the commit, and a failed commit retried command by command."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from control_plane.db.engine import Database
from control_plane.db.models import AllocationRow, IdempotencyRow
from control_plane.services import allocations
from control_plane.services import writer as writer_module
from control_plane.services.errors import NotFound
from control_plane.services.writer import Command, GroupWriter
from tests.control_plane.conftest import Api, allocate, counts, release


def _writer(api: Api) -> GroupWriter:
    return api.http.app.state.writer  # type: ignore[attr-defined]


def test_a_failing_command_is_undone_alone_and_its_gpus_stay_free(api: Api, db: Database) -> None:
    api.node("n1", gpus=8)
    tenant_id, _ = api.tenant(quota=16)
    take_all = allocate(tenant_id, 8)

    def takes_then_fails(session: Session, now: float):  # type: ignore[no-untyped-def]
        take_all(session, now)  # all 8 GPUs assigned in this savepoint...
        raise NotFound("allocation gone")  # ...then the command fails

    batch = [
        Command(use_case=allocate(tenant_id, 4)),
        Command(use_case=takes_then_fails),
        Command(use_case=allocate(tenant_id, 4)),
    ]
    _writer(api).apply_batch(batch)
    first, failed, last = (c.answer for c in batch)
    assert first.result()[0] == 201
    with pytest.raises(NotFound):
        failed.result()
    # Placed on the four GPUs the failed command had taken and given back: the placement
    # view forgot the undone assignments.
    assert last.result()[0] == 201
    gpus = {g["uuid"] for f in (first, last) for g in json.loads(f.result()[1])["gpus"]}
    assert len(gpus) == 8
    assert counts(db) == (2, 8)


def test_answers_wait_for_the_batch_commit(api: Api) -> None:
    api.node("n1", gpus=8)
    tenant_id, _ = api.tenant(quota=8)
    first = Command(use_case=allocate(tenant_id))
    seen: list[bool] = []
    one_gpu = allocate(tenant_id)

    def second_use_case(session: Session, now: float):  # type: ignore[no-untyped-def]
        seen.append(first.answer.done())
        return one_gpu(session, now)

    _writer(api).apply_batch([first, Command(use_case=second_use_case)])
    assert seen == [False]
    assert first.answer.result()[0] == 201


def test_twins_with_one_key_in_one_batch_get_one_effect(api: Api, db: Database) -> None:
    api.node("n1", gpus=8)
    tenant_id, _ = api.tenant(quota=8)
    twins = [
        Command(use_case=allocate(tenant_id), owner=tenant_id, key="k1", digest="same")
        for _ in range(2)
    ]
    _writer(api).apply_batch(twins)
    assert twins[0].answer.result() == twins[1].answer.result()
    assert counts(db) == (1, 1)
    with db.read() as session:
        assert session.execute(select(func.count()).select_from(IdempotencyRow)).scalar_one() == 1


def test_a_failed_commit_runs_the_batch_again_one_by_one(api: Api, db: Database) -> None:
    api.node("n1", gpus=8)
    tenant_id, _ = api.tenant(quota=8)
    failures: list[int] = []

    def fail_first_commit(session: Session) -> None:
        if not failures and not session.in_nested_transaction():
            failures.append(1)
            raise RuntimeError("commit refused")

    event.listen(Session, "before_commit", fail_first_commit)
    try:
        batch = [Command(use_case=allocate(tenant_id)) for _ in range(3)]
        _writer(api).apply_batch(batch)
    finally:
        event.remove(Session, "before_commit", fail_first_commit)
    assert failures == [1]
    assert [c.answer.result()[0] for c in batch] == [201, 201, 201]
    # Nothing of the failed transaction stayed: three allocations, each on its own GPU.
    assert counts(db) == (3, 3)


def test_requests_through_the_writer_share_commits(api: Api) -> None:
    api.node("n1", gpus=8)
    _, headers = api.tenant(quota=8)
    before = _writer(api).commands
    r = api.http.post("/v1/allocations", json={"gpu_count": 1}, headers=headers)
    assert r.status_code == 201
    gone = api.http.delete(f"/v1/allocations/{r.json()['id']}", headers=headers)
    assert gone.status_code == 200 and gone.json()["status"] == "released"
    assert _writer(api).commands == before + 2


def test_a_command_whose_flush_fails_fails_alone(api: Api, db: Database) -> None:
    api.node("n1", gpus=8)
    tenant_id, _ = api.tenant(quota=8)

    def orphan(session: Session, now: float):  # type: ignore[no-untyped-def]
        # A row naming no tenant: the foreign key refuses it when the ORM flushes it.
        session.add(
            AllocationRow(
                id="alloc_orphan",
                tenant_id="no-such-tenant",
                status="pending",
                gpu_count=1,
                requested_at=now,
                strategy="pack",
                job_class="batch",
            )
        )
        session.flush()
        raise AssertionError("the flush above must fail")

    batch = [
        Command(use_case=allocate(tenant_id)),
        Command(use_case=orphan),
        Command(use_case=allocate(tenant_id)),
    ]
    _writer(api).apply_batch(batch)
    assert batch[0].answer.result()[0] == 201
    with pytest.raises(IntegrityError):
        batch[1].answer.result()
    assert batch[2].answer.result()[0] == 201
    assert counts(db) == (2, 2)


def _db_file(db: Database) -> str:
    return db.url.removeprefix("sqlite:///")


def test_on_sqlite_the_loop_commits_and_waits_its_turn_behind_another_writer(
    api: Api, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local SQLite file: batches commit on the event loop's thread, no writer thread. While
    another connection (another process, say) holds the write lock, the batch waits on the
    loop without blocking it, then commits; past its turns it goes to the writer thread."""
    if not db.loop_writes:
        assert not db.is_sqlite  # PostgreSQL: the writer thread, as ever
        return
    api.node("n1", gpus=8)
    tenant_id, _ = api.tenant(quota=16)
    monkeypatch.setattr(writer_module, "LOOP_WAIT_S", 0.0)  # a retry each turn of the loop
    writer = GroupWriter(db, clock=api.clock)

    async def scenario(turns: int) -> tuple[int, str]:
        other = sqlite3.connect(_db_file(db), isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        monkeypatch.setattr(writer_module, "LOOP_WAIT_TURNS", turns)
        before = writer.batches
        task = asyncio.ensure_future(writer.call(use_case=allocate(tenant_id)))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not task.done() and writer.batches == before
        other.execute("COMMIT")
        other.close()
        return await asyncio.wait_for(task, timeout=30)

    status, text = asyncio.run(scenario(turns=1_000_000))
    assert status == 201 and json.loads(text)["status"] == "allocated"
    assert writer.batches == 1 and writer._thread is None  # committed on the loop

    # Out of turns: the writer thread takes the batch and waits for the lock there.
    status, _ = asyncio.run(scenario(turns=3))
    assert status == 201 and writer._thread is not None
    writer.stop()
    assert counts(db) == (2, 2)


def test_a_periodic_tick_is_a_command_of_the_writer(api: Api, db: Database) -> None:
    """A job's work joins a batch like a request's: a tick that fails is undone alone, the
    requests beside it commit, and the job learns its result only after the commit."""
    api.node("n1", gpus=8)
    tenant_id, _ = api.tenant(quota=16)
    take_four = allocate(tenant_id, 4)

    def tick_that_fails(session: Session) -> int:
        take_four(session, 1.0)
        raise RuntimeError("the job failed midway")

    batch = [
        Command(use_case=allocate(tenant_id, 4)),
        Command(use_case=writer_module._no_use_case, work=tick_that_fails),
        Command(use_case=writer_module._no_use_case, work=lambda session: 7),
    ]
    _writer(api).apply_batch(batch)
    assert batch[0].answer.result()[0] == 201
    with pytest.raises(RuntimeError, match="midway"):
        batch[1].answer.result()
    assert batch[2].answer.result() == 7
    assert counts(db) == (1, 4)  # the failed tick's allocation was undone
    # From a job's thread: queued to the writer, answered with the tick's own result.
    writer = _writer(api)
    before = writer.commands
    count = select(func.count()).select_from(AllocationRow)
    assert writer.run_from_thread(lambda session: session.execute(count).scalar_one()) == 1
    assert writer.commands == before + 1


def test_a_command_refused_on_its_reads_costs_the_batch_nothing(api: Api, db: Database) -> None:
    # A refusal (404, 429) comes from a command's reads, before it writes: the rest of the
    # batch commits in the same transaction, with no run again command by command.
    api.node("n1", gpus=8)
    tenant_id, _ = api.tenant(quota=8)
    one_gpu = allocate(tenant_id)

    def reads_then_refuses(session: Session, now: float):  # type: ignore[no-untyped-def]
        one_gpu(session, now)  # placed: its writes are held back (PostgreSQL)...
        raise NotFound("gone")  # ...and dropped with the command

    def refuses_on_a_read(session: Session, now: float):  # type: ignore[no-untyped-def]
        return allocations.release(
            session, tenant_id=tenant_id, allocation_id="alloc_none", now=now
        )

    writer = _writer(api)
    before = writer.batches
    batch = [
        Command(use_case=one_gpu),
        Command(use_case=refuses_on_a_read),
        Command(use_case=reads_then_refuses),
        Command(use_case=one_gpu),
    ]
    writer.apply_batch(batch)
    assert writer.batches == before + 1  # one commit for all four
    assert [batch[i].answer.result()[0] for i in (0, 3)] == [201, 201]
    for i in (1, 2):
        with pytest.raises(NotFound):
            batch[i].answer.result()
    assert counts(db) == (2, 2)


def test_a_command_refused_after_it_wrote_leaves_nothing(api: Api, db: Database) -> None:
    # A refusal after the command's writes reached the database: undone with its savepoint
    # (SQLite), or with the batch's transaction, the batch then run again command by
    # command (PostgreSQL). Either way the others commit and its writes do not.
    api.node("n1", gpus=8)
    tenant_id, _ = api.tenant(quota=8)
    one_gpu = allocate(tenant_id)

    def writes_then_refuses(session: Session, now: float):  # type: ignore[no-untyped-def]
        one_gpu(session, now)
        session.execute(select(AllocationRow.id))  # a read: the held-back writes go first
        raise NotFound("gone")

    batch = [Command(use_case=one_gpu), Command(use_case=writes_then_refuses)]
    batch.append(Command(use_case=one_gpu))
    _writer(api).apply_batch(batch)
    assert [batch[i].answer.result()[0] for i in (0, 2)] == [201, 201]
    with pytest.raises(NotFound):
        batch[1].answer.result()
    assert counts(db) == (2, 2)


def test_a_batch_counts_what_its_earlier_commands_placed_against_the_quota(
    api: Api, db: Database
) -> None:
    # Later allocations of a batch reuse the tenant's admission read of the first: the GPUs
    # placed before them must count, or the batch would run past the quota.
    api.node("n1", gpus=8)
    tenant_id, _ = api.tenant(quota=2, burst_gpus=0)
    batch = [Command(use_case=allocate(tenant_id)) for _ in range(4)]
    _writer(api).apply_batch(batch)
    assert [c.answer.result()[0] for c in batch] == [201, 201, 202, 202]
    # A release in the batch takes its GPU off the count: the allocation after it runs.
    other, _ = api.tenant("team-b", quota=1, burst_gpus=0)
    taken = Command(use_case=allocate(other))
    _writer(api).apply_batch([taken])
    taken_id = json.loads(taken.answer.result()[1])["id"]

    # The first allocation waits (the quota of one is taken); the release serves it from
    # the queue; the last must then wait too.
    more = [
        Command(use_case=allocate(other)),
        Command(use_case=release(other, taken_id)),
        Command(use_case=allocate(other)),
    ]
    _writer(api).apply_batch(more)
    assert [c.answer.result()[0] for c in more] == [202, 200, 202]
    # With nothing waiting, a release keeps the batch's read exact: after it, the tenant
    # runs one GPU fewer, which the next allocation's reused read counts.
    third, _ = api.tenant("team-c", quota=2, burst_gpus=0)
    placed = Command(use_case=allocate(third))
    _writer(api).apply_batch([placed])
    placed_id = json.loads(placed.answer.result()[1])["id"]

    last = [
        Command(use_case=allocate(third)),  # read: one running, so two now
        Command(use_case=release(third, placed_id)),  # one
        Command(use_case=allocate(third)),  # two again
        Command(use_case=allocate(third)),  # waits
    ]
    _writer(api).apply_batch(last)
    assert [c.answer.result()[0] for c in last] == [201, 200, 201, 202]
    with db.read() as session:
        running = session.execute(
            select(AllocationRow.tenant_id, func.sum(AllocationRow.gpu_count))
            .where(AllocationRow.status == "allocated")
            .group_by(AllocationRow.tenant_id)
        ).all()
    assert dict(running) == {tenant_id: 2, other: 1, third: 2}


def test_a_commit_hook_that_fails_does_not_undo_or_repeat_the_batch(
    api: Api, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    api.node("n1", gpus=8)
    tenant_id, _ = api.tenant(quota=8)

    def broken_hook(touched: set[str]) -> None:
        raise RuntimeError("hook failed")

    unhook = db.on_commit(broken_hook)
    try:
        batch = [Command(use_case=allocate(tenant_id)) for _ in range(3)]
        _writer(api).apply_batch(batch)
    finally:
        unhook()
    # Committed once and answered: the hook's failure is logged, not taken for the batch's.
    assert [c.answer.result()[0] for c in batch] == [201, 201, 201]
    assert counts(db) == (3, 3)
    assert any("commit hook failed" in r.getMessage() for r in caplog.records)
    assert not any("group commit" in r.getMessage() for r in caplog.records)
