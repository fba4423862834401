"""A TCP proxy that holds every chunk back a fixed time each way: a database across a network.

    .venv/bin/python bench/delayproxy.py LISTEN_PORT TARGET_PORT DELAY_S

Used by `alloc_throughput.py --db-delay-ms`. It runs in its own process and costs CPU of its
own, so compare only runs made through it, side by side.
"""

from __future__ import annotations

import asyncio
import sys
import time


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    due: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            at, data = await due.get()
            if not data:
                writer.close()
                return
            wait = at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)

    sender = asyncio.create_task(send())
    while True:
        data = await reader.read(65536)
        due.put_nowait((time.monotonic() + delay, data))
        if not data:
            break
    await sender


async def serve(listen_port: int, target_port: int, delay: float) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target_reader, target_writer = await asyncio.open_connection("127.0.0.1", target_port)
        await asyncio.gather(
            _pipe(reader, target_writer, delay),
            _pipe(target_reader, writer, delay),
            return_exceptions=True,
        )

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
