"""HTTP/1.1 transport guard: bounded request heads, read timeouts, connections per client IP."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

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


class _Conn(h11.Connection):
    """h11's connection, which also counts headers and keeps the reason it refused a request."""

    max_headers: int = 100
    refusal: h11.RemoteProtocolError | None = None
    coalescing: _Coalescing | None = None

    def send(self, event: Any) -> bytes | None:
        data = super().send(event)
        if type(event) is h11.Response and self.coalescing is not None:
            self.coalescing.hold_next()  # the head waits for its body (_Coalescing)
        return data

    def next_event(self) -> Any:
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as exc:
            self.refusal = exc
            raise
        if isinstance(event, h11.Request) and len(event.headers) > self.max_headers:
            self.refusal = h11.RemoteProtocolError(
                f"more than {self.max_headers} request headers", error_status_hint=431
            )
            raise self.refusal
        return event


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


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with limits on what a client may send and for how long.

    Refusals are answered here, on the event loop, in constant work per received chunk: the
    application never sees the request, and a client that is refused cannot make the server
    buffer or parse more than one head's worth of bytes.
    """

    limits: ClassVar[TransportLimits] = TransportLimits()
    per_ip: ClassVar[Counter[str]] = Counter()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = _Conn(h11.SERVER, max_incomplete_event_size=self.limits.max_head_bytes)
        self.conn.max_headers = self.limits.max_headers
        self._timer: asyncio.TimerHandle | None = None
        self._timer_kind: str | None = None
        self._refused = False
        self._drained = 0
        self._ip: str | None = None

    # Connection life

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        coalescing = _Coalescing(transport, self.loop)
        self.transport = coalescing  # type: ignore[assignment]
        self.conn.coalescing = coalescing
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
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
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
        super().data_received(data)
        if not self._refused:
            self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self._refused:
            self._arm()

    def send_400_response(self, msg: str) -> None:
        # Called by uvicorn when h11 refuses the request; the reason is kept on the connection.
        refusal = self.conn.refusal
        if refusal is not None and refusal.error_status_hint == 431:
            reason = str(refusal)
            if reason == "Receive buffer too long":
                reason = f"request head over {self.limits.max_head_bytes} bytes"
            self._refuse(431, "request_header_too_large", reason)
            return
        self._refuse(400, "bad_request", "malformed HTTP request")

    # Timers: one per connection, for the head or the body in flight

    def _arm(self) -> None:
        state = self.conn.their_state
        if state is h11.IDLE:
            # The deadline runs from when the server is ready for a head; bytes that trickle
            # in do not extend it.
            if self._timer_kind != "head":
                self._set_timer("head", self.limits.head_timeout_s)
        elif state is h11.SEND_BODY:
            self._set_timer("body", self.limits.body_idle_timeout_s)
        else:
            self._cancel_timer()

    def _set_timer(self, kind: str, delay: float) -> None:
        self._cancel_timer()
        self._timer_kind = kind
        self._timer = self.loop.call_later(delay, self._timed_out, kind)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_kind = None, None

    def _timed_out(self, kind: str) -> None:
        self._timer, self._timer_kind = None, None
        if self._refused or self.transport.is_closing():
            return
        if kind == "body" and self.flow is not None and self.flow.read_paused:
            # Reading is paused because the application is slow to take the body: the
            # client is not idle. Look again later.
            self._set_timer("body", self.limits.body_idle_timeout_s)
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
        self._cancel_timer()
        if self.cycle is not None and not self.cycle.response_complete:
            # The application is waiting for this request's body: it will not come.
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        if self.transport.is_closing():
            return
        if self.cycle is not None and self.cycle.response_started:
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
    )


def protocol_for(limits: TransportLimits) -> type[GuardedH11Protocol]:
    """A protocol class for one server: its own limits and its own count of connections."""
    return type(
        "GuardedH11Protocol",
        (GuardedH11Protocol,),
        {"limits": limits, "per_ip": Counter()},
    )
