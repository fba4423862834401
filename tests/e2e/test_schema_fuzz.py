"""schemathesis against the live OpenAPI of a real server on SQLite and on PostgreSQL: no 5xx,
no answer off its schema (PostgreSQL refuses values SQLite stores, a NUL in text above all)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.transport import Response
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.conftest import ADMIN_TOKEN
from tests.support.pg import TempPostgres
from tests.support.procs import ServerProc

pytestmark = pytest.mark.e2e

# Per operation and database, each sent as the admin and as a tenant: bounded, so that both
# databases together stay within a minute. Negative examples (schema-violating: a NUL in a
# label, an id off its pattern) must all be refused with a 4xx.
EXAMPLES = {GenerationMode.POSITIVE: 25, GenerationMode.NEGATIVE: 10}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProc, dict]]:
    tmp: Path = tmp_path_factory.mktemp(f"fuzz-{request.param}")
    url = None
    if request.param == "postgresql":
        pg: TempPostgres | None = request.getfixturevalue("pg_server")
        if pg is None:
            pytest.skip("PostgreSQL binaries not found (set JITGPU_REQUIRE_POSTGRES=1 to fail)")
        url = pg.url(pg.create_database())
    server = ServerProc(tmp, database_url=url, admin_token=ADMIN_TOKEN).start()
    try:
        server.wait_ready()
        with server.admin() as admin:
            tenant = admin.post("/v1/tenants", json={"name": "fuzz", "quota_gpus": 4}).json()
            key = admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
            admin.post(
                "/v1/nodes",
                json={
                    "name": "n1",
                    "gpus": [
                        {"uuid": f"GPU-{i}", "model": "A100", "memory_mb": 1} for i in range(4)
                    ],
                },
            )
        yield server, {"admin": ADMIN_TOKEN, "tenant": key}
    finally:
        server.stop()
        # The server must have survived every example without an unhandled error.
        assert "unhandled error" not in server.output(), server.output()[-3000:]


def test_no_server_errors_and_answers_match_the_schema(live) -> None:  # type: ignore[no-untyped-def]
    server, tokens = live
    api = schemathesis.openapi.from_dict(_without_security(f"{server.url}/openapi.json"))
    api.config.update(base_url=server.url)
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 20, "the schema lost its routes"
    failures: list[str] = []
    sent = 0
    for operation, mode in [(op, mode) for op in operations for mode in EXAMPLES]:

        @given(case=operation.as_strategy(mode))
        @settings(
            max_examples=EXAMPLES[mode],
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case) -> None:  # type: ignore[no-untyped-def]
            nonlocal sent
            # Each example goes as the admin and as a tenant, to reach both sides of a route.
            for token in tokens.values():
                sent += 1
                headers = {"Authorization": f"Bearer {token}"}
                response = case.call(headers=headers)
                excluded = [positive_data_acceptance] if _in_the_past(response) else []
                case.validate_response(response, headers=headers, excluded_checks=excluded)

        try:
            check()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE, operation.label  # no input to get wrong
        # Collect every operation's failure, then report them all (schemathesis raises a
        # BaseExceptionGroup, which `except Exception` would let through).
        except (Exception, BaseExceptionGroup) as exc:
            failures.append(f"{operation.label} ({mode.value}): {exc}")
    assert failures == [], "\n\n".join(failures)
    assert sent >= 5 * len(operations), f"only {sent} requests sent"


def _without_security(url: str) -> dict:
    """The schema less its bearer-key declaration (there for /docs' Authorize button): every
    example here carries a key, so a negative example "without Authorization" cannot exist."""
    raw = httpx.get(url).raise_for_status().json()
    raw.get("components", {}).pop("securitySchemes", None)
    for operations in raw["paths"].values():
        for operation in operations.values():
            operation.pop("security", None)
    return raw


def _in_the_past(response: Response) -> bool:
    """A hold whose start_at + ttl_s has passed: a rule against the clock, which no schema can
    state, so only this answer may refuse schema-valid data (every other check still runs)."""
    if response.status_code != 422:
        return False
    return response.json().get("error", {}).get("code") == "hold_in_past"
