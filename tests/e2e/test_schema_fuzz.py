"""schemathesis against the live OpenAPI of a real server: no 5xx, no answer off its schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.conftest import ADMIN_TOKEN
from tests.support.procs import ServerProc

pytestmark = pytest.mark.e2e

EXAMPLES_PER_OPERATION = 25


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProc, dict]]:
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    server = ServerProc(tmp, admin_token=ADMIN_TOKEN).start()
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
    api = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 20, "the schema lost its routes"
    failures: list[str] = []
    sent = 0
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case) -> None:  # type: ignore[no-untyped-def]
            nonlocal sent
            # Each example goes as the admin and as a tenant, to reach both sides of a route.
            for token in tokens.values():
                sent += 1
                case.call_and_validate(headers={"Authorization": f"Bearer {token}"})

        try:
            check()
        except Exception as exc:  # collect every operation's failure, then report them all
            failures.append(f"{operation.label}: {exc}")
    assert failures == [], "\n\n".join(failures)
    assert sent >= 5 * len(operations), f"only {sent} requests sent"
