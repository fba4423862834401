"""The Python client, sync and async, against a real control plane on loopback."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from control_plane.config import ServerSettings
from control_plane.db.engine import Database
from control_plane.db.migrate import upgrade
from smart_agent.client import AsyncClient, Client, ConnectionFailed, JitgpuError, RetryPolicy
from tests.conftest import ADMIN_TOKEN
from tests.support.liveserver import LiveServer
from tests.support.pg import free_port

NO_WAIT = RetryPolicy(attempts=3, base_s=0.0)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[str, str]]:
    db = Database(f"sqlite:///{tmp_path / 'cp.db'}")
    upgrade(db)
    settings = ServerSettings(database_url=db.url, admin_token=ADMIN_TOKEN, run_jobs=False)
    with LiveServer(db, settings) as server, Client(server.url, ADMIN_TOKEN) as admin:
        admin._http.post(
            "/v1/nodes",
            json={
                "name": "n1",
                "gpus": [{"uuid": f"G{i}", "model": "A100", "memory_mb": 1} for i in range(4)],
            },
        )
        tenant = admin.create_tenant("alice", quota_gpus=4)
        yield server.url, admin.create_api_key(tenant.id).key
    db.dispose()


def test_sync_hold_wait_claim_release(live: tuple[str, str]) -> None:
    url, key = live
    with Client(url, key) as jg:
        hold = jg.hold(2, ttl_s=600, start_in_s=0)
        ready = jg.wait_until_ready(hold.id, timeout_s=5)
        alloc = jg.claim(ready.id)
        assert alloc.warm and alloc.time_to_gpu_s == 0.0 and len(alloc.gpus) == 2
        assert [a.id for a in jg.list_allocations()] == [alloc.id]
        assert jg.release(alloc.id).status.value == "released"
        with pytest.raises(JitgpuError) as err:
            jg.allocate(5)
        assert err.value.status == 429 and err.value.code == "quota_exceeded"
        assert err.value.field == "gpu_count"


def test_async_client_does_the_same(live: tuple[str, str]) -> None:
    url, key = live

    async def scenario() -> None:
        async with AsyncClient(url, key) as jg:
            hold = await jg.hold(1, ttl_s=600)
            await jg.wait_until_ready(hold.id, timeout_s=5)
            alloc = await jg.allocate(1)  # claims the ready hold of that shape
            assert alloc.hold_id == hold.id and alloc.warm
            assert (await jg.release(alloc.id)).status.value == "released"

    asyncio.run(scenario())


def test_a_lost_answer_is_retried_with_the_same_key_and_allocates_once(
    live: tuple[str, str],
) -> None:
    url, key = live
    seen: list[str] = []
    real = httpx.Client(base_url=url)

    def flaky(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("idempotency-key", ""))
        answer = real.send(
            real.build_request(
                request.method, str(request.url), headers=request.headers, content=request.content
            )
        )
        if len(seen) == 1:
            return httpx.Response(503, json={"error": {"code": "x", "message": "lost"}})
        return httpx.Response(answer.status_code, content=answer.content, headers=answer.headers)

    with Client(url, key, retry=NO_WAIT, transport=httpx.MockTransport(flaky)) as jg:
        alloc = jg.allocate(1)
    real.close()
    assert len(seen) == 2 and seen[0] == seen[1] and seen[0]
    with Client(url, key) as jg:
        assert [a.id for a in jg.list_allocations()] == [alloc.id]


def test_unreachable_server_is_a_clear_error() -> None:
    with (
        Client(f"http://127.0.0.1:{free_port()}", "k", retry=NO_WAIT) as jg,
        pytest.raises(ConnectionFailed, match="cannot reach"),
    ):
        jg.list_holds()


def test_both_clients_wait_for_a_queued_allocation(live: tuple[str, str]) -> None:
    url, key = live
    with Client(url, ADMIN_TOKEN) as admin:
        bob = admin.create_tenant("bob", quota_gpus=4)
        bob_key = admin.create_api_key(bob.id).key
    with Client(url, bob_key) as other, Client(url, key) as jg:
        taken = other.allocate(4)  # every GPU: alice's request queues
        queued = jg.allocate(1)
        assert queued.status == "pending"
        with pytest.raises(TimeoutError, match="still pending"):
            jg.wait_until_allocated(queued.id, timeout_s=0.2, poll_s=0.05)

        async def wait_async() -> object:
            async with AsyncClient(url, key) as ajg:
                with pytest.raises(TimeoutError, match="still pending"):
                    await ajg.wait_until_allocated(queued.id, timeout_s=0.2, poll_s=0.05)
                other.release(taken.id)
                return await ajg.wait_until_allocated(queued.id, timeout_s=10, poll_s=0.05)

        done = asyncio.run(wait_async())
        assert done.status == "allocated" and len(done.gpus) == 1  # type: ignore[attr-defined]
        assert jg.wait_until_allocated(queued.id, timeout_s=1).id == queued.id


def test_secrets_are_asked_for_once_and_without_an_idempotency_key(
    live: tuple[str, str],
) -> None:
    url, _ = live
    seen: list[httpx.Request] = []

    def lossy(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(503, json={"error": {"code": "x", "message": "lost"}})

    with Client(url, ADMIN_TOKEN, retry=NO_WAIT, transport=httpx.MockTransport(lossy)) as admin:
        for mint in (
            lambda: admin.create_api_key("tnt_x"),
            lambda: admin.create_node_token("n1"),
            lambda: admin.enrol_node("n1"),
        ):
            with pytest.raises(JitgpuError):
                mint()
    assert [r.url.path for r in seen] == [
        "/v1/tenants/tnt_x/api-keys",
        "/v1/node-tokens",
        "/v1/nodes/enrol",
    ]
    assert not [r for r in seen if "idempotency-key" in r.headers]
    with Client(url, ADMIN_TOKEN) as admin:  # and the real server accepts them so
        assert admin.create_node_token("n1", label="n").key.startswith("jge_")
        assert admin.enrol_node("n1").credential.startswith("jgn_")


def test_the_readmes_examples_run(live: tuple[str, str]) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Python client", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    url, key = live
    for block in blocks:
        code = block.replace('"http://127.0.0.1:8080"', repr(url))
        exec(compile(code, "README.md", "exec"), {"token": key, "__name__": "readme"})
    with Client(url, key) as jg:
        assert {a.status.value for a in jg.list_allocations()} == {"released"}
        assert len(jg.list_allocations()) == 3
