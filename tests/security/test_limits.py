"""Bounded requests: oversize or slow heads, idle bodies and too many connections are refused
by the transport with the JSON error body, and well-behaved clients are served meanwhile."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_TOKEN
from tests.security.rawhttp import connect, read_answer, send_all
from tests.support.procs import ServerProc

pytestmark = pytest.mark.e2e

HEAD_TIMEOUT_S = 1.5
MAX_CONNECTIONS = 12
LIMITS_ENV = {
    "JITGPU_RUN_JOBS": "false",
    "JITGPU_HEADER_TIMEOUT_S": str(HEAD_TIMEOUT_S),
    "JITGPU_BODY_IDLE_TIMEOUT_S": "1.5",
    "JITGPU_MAX_CONNECTIONS_PER_IP": str(MAX_CONNECTIONS),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    tmp: Path = tmp_path_factory.mktemp("limits")
    proc = ServerProc(tmp, admin_token=ADMIN_TOKEN, env=LIMITS_ENV).start()
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()
    assert "Traceback" not in proc.output()


# The head of a request the application reads the whole body of before it answers.
ADMIN_POST_TENANT = (
    b"POST /v1/tenants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Authorization: Bearer " + ADMIN_TOKEN.encode() + b"\r\n"
)


def _error(answer, status: int, code: str) -> str:  # type: ignore[no-untyped-def]
    assert answer.status == status, (answer.status, answer.body[:300])
    assert answer.headers["content-type"] == "application/json"
    error = answer.json()["error"]
    assert error["code"] == code
    return error["message"]


def _statuses(sock: socket.socket) -> list[int]:
    """The status of every answer on the connection, read until the server closes it."""
    sock.settimeout(10)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return [int(m) for m in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]


def test_a_head_over_64_kib_is_431(server: ServerProc) -> None:
    with connect(server.url) as sock:
        send_all(sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000)
        message = _error(read_answer(sock), 431, "request_header_too_large")
    assert "65536" in message


def test_more_than_100_headers_is_431(server: ServerProc) -> None:
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(101))
    with connect(server.url) as sock:
        send_all(sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
        assert "100 request headers" in _error(read_answer(sock), 431, "request_header_too_large")
    # 99 headers (plus Host) are fine.
    with connect(server.url) as sock:
        fine = b"".join(b"X-H%d: v\r\n" % i for i in range(99))
        send_all(sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + fine + b"\r\n")
        assert read_answer(sock).status == 200


def test_a_head_of_many_small_headers_over_64_kib_is_431(server: ServerProc) -> None:
    # Every header is small and the head is complete: counted header by header, not by chunk.
    many = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 900) for i in range(80))
    with connect(server.url) as sock:
        send_all(sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
        assert "65536" in _error(read_answer(sock), 431, "request_header_too_large")


def test_an_http_1_1_request_without_one_host_is_400(server: ServerProc) -> None:
    with connect(server.url) as sock:
        send_all(sock, b"GET /healthz HTTP/1.1\r\nX-A: 1\r\n\r\n")
        assert "Host" in _error(read_answer(sock), 400, "bad_request")
    with connect(server.url) as sock:
        send_all(sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n")
        assert "Host" in _error(read_answer(sock), 400, "bad_request")


@pytest.mark.parametrize(
    "head",
    [
        b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n",
        b"GET /healthz HTTP/1.1\nHost: x\n\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  2\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n",
    ],
    ids=["length-and-chunked", "two-lengths", "bare-lf", "folded-line", "space-before-colon"],
)
def test_heads_a_proxy_could_read_otherwise_are_400(server: ServerProc, head: bytes) -> None:
    # Requests two parsers could frame differently (request smuggling) are refused outright.
    with connect(server.url) as sock:
        send_all(sock, head)
        _error(read_answer(sock), 400, "bad_request")


def test_pipelined_requests_are_answered_in_order(server: ServerProc) -> None:
    with connect(server.url) as sock:
        send_all(
            sock,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        assert _statuses(sock) == [200, 404]


def test_a_large_body_before_a_pipelined_head_does_not_count_as_head(server: ServerProc) -> None:
    body = b"x" * 200_000  # arrives in the same chunks as the next request's head
    with connect(server.url) as sock:
        send_all(
            sock,
            b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
            + body
            + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        assert _statuses(sock) == [405, 200]


def _trickle_a_head(sock: socket.socket) -> float:
    """Start a head and send a byte now and then until refused; seconds until the 408."""
    started = time.monotonic()
    send_all(sock, b"GET /healthz HTTP/1.1\r\n")
    # A byte now and then does not extend the deadline.
    while time.monotonic() - started < HEAD_TIMEOUT_S + 1 and send_all(sock, b"X"):
        time.sleep(0.2)
    _error(read_answer(sock), 408, "request_timeout")
    return time.monotonic() - started


def test_the_next_head_on_a_kept_alive_connection_is_timed_too(server: ServerProc) -> None:
    with connect(server.url) as sock:
        send_all(sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_answer(sock).status == 200
        assert _trickle_a_head(sock) <= HEAD_TIMEOUT_S + 2.0


def test_a_head_that_trickles_in_is_408_on_time(server: ServerProc) -> None:
    with connect(server.url) as sock:
        waited = _trickle_a_head(sock)
    assert HEAD_TIMEOUT_S - 0.1 <= waited <= HEAD_TIMEOUT_S + 2.0


def test_an_idle_body_is_408(server: ServerProc) -> None:
    with connect(server.url) as sock:
        send_all(
            sock,
            ADMIN_POST_TENANT + b'Content-Length: 100\r\n\r\n{"name":',
        )
        message = _error(read_answer(sock), 408, "request_timeout")
    assert "body" in message
    # Nothing was created from the half body.
    with server.admin() as admin:
        assert admin.get("/v1/tenants").json() == []


def test_an_oversize_body_is_413(server: ServerProc) -> None:
    with connect(server.url) as sock:
        send_all(
            sock,
            b"POST /v1/tenants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 50000000\r\n\r\n",
        )
        _error(read_answer(sock), 413, "body_too_large")


def test_a_chunked_body_with_an_endless_trailer_is_413(server: ServerProc) -> None:
    # The parser keeps a trailer field whole: without a bound, memory grows with what the
    # client sends (h11 bounded it; llhttp does not).
    with connect(server.url) as sock:
        send_all(
            sock,
            ADMIN_POST_TENANT + b"Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n0\r\nX-Trailer: ",
        )
        for _ in range(80):  # 5 MiB, past twice the 1 MiB body limit
            if not send_all(sock, b"t" * 65_536):
                break
        assert "trailers" in _error(read_answer(sock), 413, "body_too_large")
    with server.admin() as admin:  # nothing was created from it
        assert admin.get("/v1/tenants").json() == []


def test_connections_past_the_per_ip_cap_are_429_and_others_still_served(
    server: ServerProc,
) -> None:
    held = [connect(server.url) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.2)  # the server has accepted them all
        with connect(server.url) as extra:
            answer = read_answer(extra)
        _error(answer, 429, "too_many_connections")
        assert answer.headers["retry-after"] == "1"
    finally:
        for sock in held:
            sock.close()
    # Closed connections no longer count.
    assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200


def test_normal_clients_are_served_while_bad_ones_are_refused(server: ServerProc) -> None:
    slow = connect(server.url)
    try:
        send_all(slow, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        with connect(server.url) as big:
            send_all(big, b"GET /healthz HTTP/1.1\r\nX-Big: " + b"b" * 1_000_000)
            with httpx.Client(base_url=server.url, timeout=5) as http:
                for _ in range(20):
                    assert http.get("/healthz").status_code == 200
    finally:
        slow.close()


def test_a_malformed_request_is_400_with_the_json_body(server: ServerProc) -> None:
    with connect(server.url) as sock:
        send_all(sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n")
        _error(read_answer(sock), 400, "bad_request")
