"""HTTP/1.1 transport guard: bounded request heads, read timeouts, connections per client IP."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass
from functools import partial
from http import HTTPStatus
from typing import Any, ClassVar

import httptools
from starlette.types import Message, Send
from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from control_plane.config import ServerSettings

# After a refusal the connection stays open this long, reading and dropping what the client
# still sends, so that it can read the answer (closing with unread input sends a reset, which
# may reach the client before the answer does).
LINGER_S = 1.0
# ...but no more than this much of it is read: past it reading stops (the client's sends
# block) until the connection closes, so a client pushing 100 MiB costs the loop nothing.
DRAIN_BYTES = 1_048_576


@dataclass(frozen=True)
class TransportLimits:
    """What one client may cost the server before a request reaches the application."""

    max_head_bytes: int = 65_536
    max_headers: int = 100
    head_timeout_s: float = 10.0
    body_idle_timeout_s: float = 30.0
    max_connections_per_ip: int = 256
    # What a request may send after its head: the body with its chunk framing and trailers.
    # The application refuses a body over its own limit (413); this bounds what the parser
    # itself would buffer, such as a chunked body's trailer fields, which it keeps whole.
    max_body_wire_bytes: int = 2 * 1_048_576 + 65_536


class _Coalescing:
    """The connection's transport, sending a response's head in one write with its body.

    uvicorn writes the head and the body separately: two send() calls and two packets per
    answer, which was about a tenth of the server's CPU on allocate and release. The head is
    held until the next write (the body, in the same step of the application); a head whose
    body does not follow at once is sent on the loop's next turn anyway."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._hold = False
        self._held: bytes | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def hold_next(self) -> None:
        self._hold = True

    def write(self, data: bytes) -> None:
        if self._hold:
            self._hold = False
            if self._held is None:
                self._loop.call_soon(self.flush)
            self._held = (self._held or b"") + data
            return
        if self._held is not None:
            data, self._held = self._held + data, None
        if data:
            self._transport.write(data)

    def flush(self) -> None:
        self._hold = False
        if self._held is not None:
            held, self._held = self._held, None
            if not self._transport.is_closing():
                self._transport.write(held)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()


def error_bytes(status: int, code: str, message: str, extra: dict[str, str] | None = None) -> bytes:
    """A whole HTTP/1.1 answer with the project's JSON error body; the connection closes."""
    body = json.dumps({"error": {"code": code, "message": message, "field": None}}).encode()
    headers = {
        "content-type": "application/json",
        "content-length": str(len(body)),
        "connection": "close",
        **(extra or {}),
    }
    head = f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode("latin-1") + b"\r\n" + body


class _Refusal(Exception):
    """Raised from a parser callback: the request is refused with this answer."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.answer = (status, code, message)


async def _holding_head(send: Send, transport: _Coalescing, message: Message) -> None:
    if message["type"] == "http.response.start":
        transport.hold_next()  # the head waits for its body (_Coalescing)
    await send(message)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with limits on what a client may send and for how long.

    llhttp bounds nothing itself: one 100 MiB header once froze a plain httptools server for
    10 s. Here the head is counted as it arrives, in constant work per received chunk:
    - the bytes of the request line and headers, from the parser's callbacks, and every
      received chunk that is all head, which bounds what the parser buffers of a header not
      yet complete;
    - the headers, one by one;
    - the time since the server became ready for the head (trickling bytes do not extend it),
      and the time since the last body bytes while a body is due.
    Refusals are answered here, on the event loop, with the project's JSON error body: the
    application never sees the request.
    """

    limits: ClassVar[TransportLimits] = TransportLimits()
    per_ip: ClassVar[Counter[str]] = Counter()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refused = False
        self._drained = 0
        self._ip: str | None = None
        self._head_bytes = 0  # request line and headers seen by the callbacks
        self._headers_seen = 0
        self._has_host = False
        self._in_head = False  # a request began and its head is not complete
        self._in_body = False  # a head is complete and its body is not
        self._head_chunks = 0  # bytes of received chunks that were all head
        self._body_wire = 0  # bytes received since the head completed
        self._chunk_all_head = False
        # One timer per connection, moved lazily: a deadline that only moves later needs no
        # new timer, so an ordinary request costs no timer of its own.
        self._waiting: str | None = None  # for the client's "head" or "body", or None
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None

    # Connection life

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = _Coalescing(transport, self.loop)  # type: ignore[assignment]
        self._ip = self.client[0] if self.client else None
        if self._ip is not None:
            self.per_ip[self._ip] += 1
            if self.per_ip[self._ip] > self.limits.max_connections_per_ip:
                self._refuse(
                    429,
                    "too_many_connections",
                    f"more than {self.limits.max_connections_per_ip} open connections from "
                    "this address; close some and retry",
                    {"retry-after": "1"},
                )
                return
        self._wait_for("head")

    def connection_lost(self, exc: Exception | None) -> None:
        self._waiting = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._ip is not None:
            self.per_ip[self._ip] -= 1
            if self.per_ip[self._ip] <= 0:
                del self.per_ip[self._ip]
            self._ip = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            # Answered already: what still comes is dropped until the linger ends.
            self._drained += len(data)
            if self._drained > DRAIN_BYTES:
                self.transport.pause_reading()
            return
        self._unset_keepalive_if_required()
        self._chunk_all_head = self._in_head or self._waiting == "head"
        was_in_body = self._in_body
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError as exc:
            cause = exc.__context__
            if isinstance(cause, _Refusal):
                self._refuse(*cause.answer)
            else:
                self._refuse(400, "bad_request", "malformed HTTP request")
            return
        if self._in_head and self._chunk_all_head:
            self._head_chunks += len(data)
            if self._head_chunks > self.limits.max_head_bytes:
                self._refuse(*self._head_too_large())
                return
        if self._in_body or was_in_body:
            self._body_wire += len(data)
            if self._body_wire > self.limits.max_body_wire_bytes:
                self._refuse(
                    413,
                    "body_too_large",
                    f"request body, with its framing and trailers, over "
                    f"{self.limits.max_body_wire_bytes} bytes",
                )
                return
        if self._in_body:
            self._wait_for("body")  # body bytes came: the idle deadline moves

    # Parser callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = self._headers_seen = self._head_chunks = 0
        self._has_host = False

    def on_url(self, url: bytes) -> None:
        self._head_bytes += len(url)
        if self._head_bytes > self.limits.max_head_bytes:
            raise _Refusal(*self._head_too_large())
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers_seen += 1
        if self._headers_seen > self.limits.max_headers:
            raise _Refusal(
                431,
                "request_header_too_large",
                f"more than {self.limits.max_headers} request headers",
            )
        self._head_bytes += len(name) + len(value) + 4  # ": " and CRLF
        if self._head_bytes > self.limits.max_head_bytes:
            raise _Refusal(*self._head_too_large())
        if len(name) == 4 and name.lower() == b"host":
            if self._has_host:  # two hosts: which one a proxy in front routed by is unknown
                raise _Refusal(400, "bad_request", "more than one Host header")
            self._has_host = True
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._chunk_all_head = False
        # HTTP/1.1 requires one Host (RFC 9112 3.2); a request without one is refused, as by h11.
        if not self._has_host and self.parser.get_http_version() == "1.1":
            raise _Refusal(400, "bad_request", "HTTP/1.1 request without a Host header")
        self._in_body = True
        self._body_wire = 0
        self._wait_for("body")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_body = False
        self._wait_for(None)  # the server's turn: no deadline for the client
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._refused:
            return
        if self._in_body:
            self._wait_for("body")
        elif self._in_head or self.cycle is None or self.cycle.response_complete:
            self._wait_for("head")

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        # The cycle writes a response's head and body separately; hold the head for the body.
        cycle.send = partial(_holding_head, cycle.send, self.transport)  # type: ignore[method-assign]
        super()._start_asgi_task(cycle, app)

    def _head_too_large(self) -> tuple[int, str, str]:
        return (
            431,
            "request_header_too_large",
            f"request head over {self.limits.max_head_bytes} bytes",
        )

    # The deadline: for the head or the body in flight

    def _wait_for(self, kind: str | None) -> None:
        if kind == "head" and self._waiting == "head":
            # The head's deadline runs from when the server became ready for it: bytes that
            # trickle in do not extend it. The body's runs from its last bytes.
            return
        self._waiting = kind
        if kind is None:
            return
        limits = self.limits
        delay = limits.head_timeout_s if kind == "head" else limits.body_idle_timeout_s
        self._deadline = self.loop.time() + delay
        if self._timer is not None and self._timer.when() > self._deadline:
            self._timer.cancel()
            self._timer = None
        if self._timer is None:
            self._timer = self.loop.call_at(self._deadline, self._timed_out)

    def _timed_out(self) -> None:
        self._timer = None
        kind = self._waiting
        if kind is None or self._refused or self.transport.is_closing():
            return
        if self.loop.time() < self._deadline:
            self._timer = self.loop.call_at(self._deadline, self._timed_out)
            return
        if kind == "body" and self.flow is not None and self.flow.read_paused:
            # Reading is paused because the application is slow to take the body: the
            # client is not idle. Look again later.
            self._wait_for("body")
            return
        if kind == "head":
            message = f"request head not complete within {self.limits.head_timeout_s:g}s"
        else:
            message = f"no request body data for {self.limits.body_idle_timeout_s:g}s"
        self._refuse(408, "request_timeout", message)

    # Refusal

    def _refuse(
        self, status: int, code: str, message: str, extra: dict[str, str] | None = None
    ) -> None:
        self._refused = True
        self._waiting = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        # The cycle of a request in flight; the last one stays set once answered.
        cycle = self.cycle if self.cycle is not None and not self.cycle.response_complete else None
        if cycle is not None:
            # The application is waiting for this request's body: it will not come.
            cycle.disconnected = True
            cycle.message_event.set()
        if self.transport.is_closing():
            return
        if cycle is not None and cycle.response_started:
            # The application has answered already (a 413 before the body, say): a second
            # answer would corrupt the stream, so the connection just closes.
            self.transport.close()
            return
        self.transport.write(error_bytes(status, code, message, extra))
        if self.flow is not None:
            self.flow.resume_reading()  # keep draining so the client can read the answer
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)


def limits_of(settings: ServerSettings) -> TransportLimits:
    return TransportLimits(
        max_head_bytes=settings.max_header_bytes,
        max_headers=settings.max_headers,
        head_timeout_s=settings.header_timeout_s,
        body_idle_timeout_s=settings.body_idle_timeout_s,
        max_connections_per_ip=settings.max_connections_per_ip,
        max_body_wire_bytes=2 * settings.max_body_bytes + settings.max_header_bytes,
    )


def protocol_for(limits: TransportLimits) -> type[GuardedHttpToolsProtocol]:
    """A protocol class for one server: its own limits and its own count of connections."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {"limits": limits, "per_ip": Counter()},
    )
