"""A small OpenAI-compatible chat server on 127.0.0.1, scripted by the test that starts it."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pred_llm_helpers import GOOD


@dataclass
class Script:
    """What the server answers, one step per request; after the plan runs out, GOOD."""

    plan: deque[tuple[str, Any]] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def answer(self, content: str) -> Script:
        self.plan.append(("answer", content))
        return self

    def status(self, code: int) -> Script:
        self.plan.append(("status", code))
        return self

    def slow(self, seconds: float) -> Script:
        self.plan.append(("slow", seconds))
        return self

    def reset(self) -> None:
        self.plan.clear()
        self.requests.clear()
        self.release.clear()


def _completion(model: str, content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 300, "completion_tokens": 40, "total_tokens": 340},
    }


def make_app(script: Script) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        script.requests.append({"body": body, "auth": request.headers.get("authorization")})
        kind, arg = script.plan.popleft() if script.plan else ("answer", GOOD)
        if kind == "status":
            error = {"message": f"scripted {arg}", "type": "test_error", "code": str(arg)}
            return JSONResponse({"error": error}, status_code=arg)
        if kind == "slow":
            # Bounded, and cut short when the test ends, so shutdown never waits on it.
            deadline = time.monotonic() + arg
            while time.monotonic() < deadline and not script.release.is_set():
                await asyncio.sleep(0.01)
            arg = GOOD
        return JSONResponse(_completion(body.get("model", "?"), arg))

    return app


@contextmanager
def serve(script: Script) -> Iterator[str]:
    """Run the app in a thread on a free loopback port; yields the api_base."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        make_app(script), log_level="warning", lifespan="off", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test LLM server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        script.release.set()
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def closed_port() -> int:
    """A loopback port with nothing listening (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
