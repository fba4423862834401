"""PostgreSQL plans a prepared statement once for any parameter values (its generic plan) after
a few executions on a connection. The hot statements that filter by a state must still use an
index then: a bound state is planned as "any state", and on a table of past allocations that
plan reads every row, on every release (it took the allocation rate from 500/s to 250/s within
two minutes of a fresh database, and grows with the history)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy.dialects import postgresql

from control_plane.db.loopreads import folded
from control_plane.services import beatread, periodic, sql
from tests.support.pg import TempPostgres

PAST = 20_000  # allocations and assignments that ended, holds that expired
NOW = 16  # of each that are current

# Every hot statement and every tick's read that selects rows of these tables by their state.
STATEMENTS = {
    "admission": sql.TENANT_ADMISSION,
    "queue tenants": sql.QUEUE_TENANTS,
    "queue head": sql.QUEUE_HEAD,
    "allocated by class": sql.ALLOCATED_BY_CLASS,
    "claimable holds": sql.CLAIMABLE_HOLDS,
    "release": sql.RELEASE_ALLOCATED,
    "end released assignments": sql.END_RELEASED_ASSIGNMENTS,
    # Every tick's reads.
    "active hold timings": periodic.ACTIVE_HOLD_TIMINGS,
    "leased allocations": periodic.LEASED_ALLOCATIONS,
    # The loop reader plans it once for every node (db/loopreads.py, GENERIC_PLANS).
    "heartbeat read": folded(beatread.reads("a key's hash")),
}
BIG = {"allocation", "assignment", "hold", "node", "gpu"}
NODES = 500  # of 8 GPUs each


@pytest.fixture
def history(pg_server: TempPostgres | None) -> Iterator[psycopg.Connection]:
    """A database at head with a tenant's long history: many ended rows, a few current ones,
    and the planner's statistics of them."""
    if pg_server is None:
        pytest.skip("PostgreSQL binaries not found (set JITGPU_REQUIRE_POSTGRES=1 to fail)")
    name = pg_server.create_database(template=pg_server.template)  # type: ignore[attr-defined]
    url = pg_server.url(name).replace("postgresql+psycopg", "postgresql")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            _fill(conn)
            yield conn
    finally:
        pg_server.drop_database(name)


def _fill(conn: psycopg.Connection) -> None:
    conn.execute(
        "INSERT INTO tenant (id, name, quota_gpus, burst_gpus, weight, created_at, max_held_gpus,"
        " max_idle_gpu_hours_per_day, max_hold_ttl_s, holds_may_preempt_holds, usage_gpu_s,"
        " usage_at) VALUES ('t', 't', 64, 0, 1, 0, 8, 8, 3600, false, 0, 0)"
    )
    conn.execute(
        "INSERT INTO node (id, name, spine, leaf, status, registered_at)"
        " SELECT CASE WHEN i = 1 THEN 'n' ELSE 'n' || i END, 'n' || i, 's', 'l', 'online', 0"
        " FROM generate_series(1, %s) i",
        (NODES,),
    )
    conn.execute(
        "INSERT INTO gpu (uuid, node_id, model, memory_mb, healthy, present)"
        " SELECT 'g' || i, 'n', 'A100', 81920, true, true FROM generate_series(1, %s) i",
        (NOW,),
    )
    conn.execute(
        "INSERT INTO gpu (uuid, node_id, model, memory_mb, healthy, present)"
        " SELECT 'g' || i || '-' || j, 'n' || i, 'A100', 81920, true, true"
        " FROM generate_series(2, %s) i, generate_series(1, 8) j",
        (NODES,),
    )
    conn.execute(
        "INSERT INTO allocation (id, tenant_id, status, gpu_count, warm, requested_at,"
        " strategy, job_class) SELECT 'a' || i, 't',"
        " CASE WHEN i <= %s THEN 'allocated' ELSE 'released' END,"
        " 1, false, i, 'pack', 'batch' FROM generate_series(1, %s) i",
        (NOW, PAST + NOW),
    )
    conn.execute(
        "INSERT INTO assignment (gpu_uuid, node_id, allocation_id, started_at, ended_at)"
        " SELECT 'g' || (1 + i %% %s), 'n', 'a' || i, i, CASE WHEN i <= %s THEN NULL ELSE i END"
        " FROM generate_series(1, %s) i",
        (NOW, NOW, PAST + NOW),
    )
    conn.execute(
        "INSERT INTO hold (id, tenant_id, status, gpu_count, start_at, ttl_s, lead_s, expires_at,"
        " confidence, source, strategy, created_at, idle_gpu_s) SELECT 'h' || i, 't',"
        " CASE WHEN i <= %s THEN 'ready' ELSE 'expired' END, 1, i, 60, 60, i + 60, 0.5, 'agent',"
        " 'pack', i, 0 FROM generate_series(1, %s) i",
        (NOW, PAST + NOW),
    )
    conn.execute("ANALYZE")


def generic_plan(conn: psycopg.Connection, statement: Any) -> dict:
    """The plan PostgreSQL keeps for the statement once prepared, whatever the values."""
    text = statement.compile(dialect=postgresql.dialect(paramstyle="pyformat")).string
    numbers: dict[str, int] = {}
    text = re.sub(
        r"%\((\w+)\)s", lambda m: f"${numbers.setdefault(m.group(1), len(numbers) + 1)}", text
    )
    conn.execute("DEALLOCATE ALL")
    conn.execute(f"PREPARE q AS {text}")
    conn.execute("SET plan_cache_mode = force_generic_plan")
    nulls = f"({', '.join('NULL' for _ in numbers)})" if numbers else ""
    found = conn.execute(f"EXPLAIN (FORMAT JSON) EXECUTE q{nulls}").fetchone()
    assert found is not None
    plan = found[0]
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


def scans(plan: dict) -> Iterator[tuple[str, str]]:
    """(node type, table) of every scan in the plan."""
    if "Relation Name" in plan:
        yield plan["Node Type"], plan["Relation Name"]
    for child in plan.get("Plans", []):
        yield from scans(child)


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_a_hot_statement_reads_a_long_history_through_an_index(
    history: psycopg.Connection, name: str
) -> None:
    found = list(scans(generic_plan(history, STATEMENTS[name])))
    assert any(table in BIG for _, table in found), found  # the plan was read
    whole = [(kind, table) for kind, table in found if table in BIG and kind == "Seq Scan"]
    assert not whole, f"{name} reads every row of {whole} when prepared: {found}"


def test_a_state_in_the_text_is_a_name_never_a_value_from_outside() -> None:
    assert "'allocated'" in str(sql.const("allocated"))
    with pytest.raises(ValueError, match="not a state name"):
        sql.const("x' OR '1'='1")
