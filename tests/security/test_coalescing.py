"""The transport sends an answer's head in one write with its body, and never reorders or
loses a write: a held head goes out on the loop's next turn, or before a close."""

from __future__ import annotations

import asyncio

from control_plane.api.transport import _Coalescing


class Recorder(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.eof = False

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.writes.append(bytes(data))

    def write_eof(self) -> None:
        self.eof = True

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


async def _turn() -> None:
    await asyncio.sleep(0)


def test_head_and_body_go_out_in_one_write() -> None:
    async def run() -> list[bytes]:
        inner = Recorder()
        out = _Coalescing(inner, asyncio.get_running_loop())
        out.hold_next()
        out.write(b"HTTP/1.1 200 OK\r\n\r\n")
        assert inner.writes == []
        out.write(b"body")
        out.write(b"")  # h11's end of a Content-Length message
        await _turn()
        return inner.writes

    assert asyncio.run(run()) == [b"HTTP/1.1 200 OK\r\n\r\nbody"]


def test_a_head_without_a_body_goes_out_on_the_next_turn() -> None:
    async def run() -> None:
        inner = Recorder()
        out = _Coalescing(inner, asyncio.get_running_loop())
        out.hold_next()
        out.write(b"head")
        await _turn()
        assert inner.writes == [b"head"]
        out.write(b"later")
        assert inner.writes == [b"head", b"later"]

    asyncio.run(run())


def test_close_and_eof_send_what_is_held_first() -> None:
    async def run() -> None:
        inner = Recorder()
        out = _Coalescing(inner, asyncio.get_running_loop())
        out.hold_next()
        out.write(b"head")
        out.write_eof()
        assert inner.writes == [b"head"] and inner.eof
        out.hold_next()
        out.write(b"second")
        out.close()
        assert inner.writes == [b"head", b"second"] and inner.closed
        await _turn()  # the scheduled flush finds nothing left to send
        assert inner.writes == [b"head", b"second"]

    asyncio.run(run())


def test_only_the_flagged_write_waits() -> None:
    async def run() -> None:
        inner = Recorder()
        out = _Coalescing(inner, asyncio.get_running_loop())
        out.write(b"one")
        out.write(b"two")
        assert inner.writes == [b"one", b"two"]

    asyncio.run(run())
