"""Raw HTTP/1.1 over a socket, for clients no HTTP library would be: huge or slow heads."""

from __future__ import annotations

import json
import socket
import statistics
import threading
import time
from dataclasses import dataclass

HUGE = 100 * 1024 * 1024  # a request head far past any limit


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


def connect(url: str, timeout: float = 10.0) -> socket.socket:
    host, _, port = url.removeprefix("http://").partition(":")
    return socket.create_connection((host, int(port)), timeout=timeout)


def read_answer(sock: socket.socket, timeout: float = 10.0) -> Answer:
    """Read one answer (the server closes after a refusal); fails on a closed, empty stream."""
    sock.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while b"\r\n\r\n" not in data or not _complete(data):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no complete answer; got {data[:200]!r}")
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if not head:
        raise ConnectionError("connection closed without an answer")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    return Answer(status, headers, body)


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            return len(body) >= int(value)
    return False


def send_all(sock: socket.socket, data: bytes) -> bool:
    """Send what the server takes; False once it stops reading (it has answered)."""
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False


def huge_header_client(url: str, stop: threading.Event, refused: list[int]) -> None:
    """Send a 100 MiB header again and again; count how often the server cut it short."""
    payload = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Huge: " + b"h" * HUGE
    while not stop.is_set():
        try:
            with connect(url, timeout=5) as sock:
                sock.sendall(payload)
        except OSError:
            refused.append(1)  # the server answered 431 and closed: the send could not finish
            continue
        time.sleep(0.1)


def slow_header_client(url: str, stop: threading.Event) -> None:
    """A head that never ends: a few bytes every half second, reconnecting when timed out."""
    while not stop.is_set():
        try:
            with connect(url, timeout=5) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\n")
                while not stop.is_set():
                    sock.sendall(b"X-Slow: 1\r\n")
                    time.sleep(0.5)
        except OSError:
            continue


def p95(values: list[float]) -> float:
    """The 95th percentile (needs at least two values)."""
    return statistics.quantiles(values, n=20)[-1]
