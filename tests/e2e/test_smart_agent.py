"""The product end to end, real processes on 127.0.0.1: control plane, a simulated node
agent, the smart agent. Cue lines in a watched log make a hold that becomes ready; the job
starting claims it with time-to-GPU near 0; planted secrets reach neither the LLM nor the
control plane (checked on the wire and at rest); SIGTERM stops the agent cleanly, with or
without cancelling its holds."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
import yaml
from fastapi import FastAPI, Request, Response

from tests.conftest import ADMIN_TOKEN
from tests.support.nodes import enrol_token
from tests.support.pg import free_port
from tests.support.procs import JITGPU, Proc, ServerProc, wait_for

pytestmark = pytest.mark.e2e

SECRETS = (
    "sk-proj-Zq8ZbT3BlbkFJd9s8d7f6g5h4j3k2",
    "hunter2-passw0rd",
    "alice.smith@example.com",
    "10.20.30.40",
    "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
)
# The secrets sit on the cue line itself, whose excerpt goes to the model: redaction must act.
LINES = (
    f"connecting to postgres://alice:{SECRETS[1]}@{SECRETS[3]}/runs\n",
    f"preprocessing done (key {SECRETS[0]}, notify {SECRETS[2]} from {SECRETS[3]}, "
    f"token {SECRETS[4]}, postgres://alice:{SECRETS[1]}@db/runs)\n",
)
# Text of the log that must never reach the control plane (the rationale is the model's).
LOG_TEXT = ("preprocessing", "postgres", "connecting", "pipeline.log", "training follows")
ANSWER = {
    "forecasts": [
        {
            "start_in_s": 0,
            "end_in_s": 300,
            "gpu_count": 2,
            "confidence": 0.9,
            "rationale": "preprocessing finished; training follows",
        }
    ]
}


class _Served:
    """A FastAPI app served on a free loopback port from a thread, while in a `with`."""

    def _serve(self, app: FastAPI) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> _Served:
        self.thread.start()
        wait_for(lambda: self.server.started, timeout=20, what=type(self).__name__)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class RecordingProxy(_Served):
    """A reverse proxy to the control plane that keeps every request the agent sends (line,
    headers but the bearer token, body): what the control plane received, byte for byte."""

    HOP = frozenset({"host", "content-length", "transfer-encoding", "connection"})

    def __init__(self, upstream: str) -> None:
        self.requests: list[str] = []
        app = FastAPI()
        client = httpx.AsyncClient(base_url=upstream, timeout=30)

        @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
        async def forward(path: str, request: Request) -> Response:
            body = await request.body()
            headers = {
                k: v
                for k, v in request.headers.items()
                if k.lower() not in self.HOP and k.lower() != "authorization"
            }
            self.requests.append(
                f"{request.method} {request.url.path}?{request.url.query}\n"
                + "".join(f"{k}: {v}\n" for k, v in headers.items())
                + body.decode(errors="replace")
            )
            answer = await client.request(
                request.method,
                "/" + path,
                params=request.query_params,
                content=body,
                headers={**headers, "authorization": request.headers.get("authorization", "")},
            )
            return Response(
                answer.content,
                status_code=answer.status_code,
                media_type=answer.headers.get("content-type"),
            )

        self._serve(app)


class ChatServer(_Served):
    """A small OpenAI-compatible server on loopback that records every request body."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> dict:
            self.bodies.append((await request.body()).decode())
            return {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "stub",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": json.dumps(ANSWER)},
                    }
                ],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
            }

        self._serve(app)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict]:
    server = ServerProc(
        tmp_path, admin_token=ADMIN_TOKEN, env={"JITGPU_JOBS_INTERVAL_S": "1"}
    ).start()
    procs: list[Proc] = [server]
    try:
        server.wait_ready()
        with server.admin() as admin:
            tenant = admin.post("/v1/tenants", json={"name": "alice", "quota_gpus": 4}).json()
            key = admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
            enrol = enrol_token(admin, "sim-1", {})
        (tmp_path / "node.yaml").write_text(
            yaml.safe_dump(
                {
                    "heartbeat_interval_s": 0.5,
                    "cache_dir": str(tmp_path / "cache"),
                    "warmup_profiles": {"quick": [{"command": "sleep 1", "timeout_s": 30}]},
                }
            )
        )
        node = Proc(
            [
                *JITGPU,
                "node",
                "--server",
                server.url,
                "--name",
                "sim-1",
                "--simulated-gpus",
                "4",
                "--config",
                str(tmp_path / "node.yaml"),
            ],
            log=tmp_path / "node.log",
            env={"JITGPU_ENROL_TOKEN": enrol},
        ).start()
        procs.append(node)
        with server.admin() as admin:
            wait_for(
                lambda: len(admin.get("/v1/gpus").json()) == 4, timeout=30, what="the node's GPUs"
            )
        yield {"server": server, "key": key, "tmp": tmp_path, "procs": procs}
    finally:
        for proc in reversed(procs):
            proc.stop()


def _agent_config(
    tmp: Path,
    server: str,
    *,
    llm_port: int | None = None,
    cancel_on_exit: bool = False,
    allocate_on_miss: bool = False,
) -> Path:
    (tmp / "logs").mkdir()
    policy: dict = {
        "min_confidence": 0.5,
        "lead_s": 0,
        "hold_ttl_s": 300,
        "predictors": ["cues"],
        "ensemble": "off",
        "warmup": {"default": "quick"},
        "max_gpus_per_hold": 2,
    }
    if llm_port is not None:
        policy["predictors"] = ["llm"]
        policy["llm"] = {
            "model": "openai/stub",
            "api_base": f"http://127.0.0.1:{llm_port}/v1",
            "api_key_env": "STUB_LLM_KEY",
            "calls_per_hour": 100,
        }
    (tmp / "policy.yaml").write_text(yaml.safe_dump(policy))
    train = tmp / "train.py"
    train.write_text("import sys, time\ntime.sleep(float(sys.argv[1]) if sys.argv[1:] else 6)\n")
    (tmp / "agent.yaml").write_text(
        yaml.safe_dump(
            {
                "server": server,
                "token_env": "JITGPU_TOKEN",
                "policy": "policy.yaml",
                "prediction_log": str(tmp / "predictions.db"),
                "cycle_s": 3600,
                "reconcile_s": 1,
                "debounce_s": 0.5,
                "poll_s": 0.2,
                "cancel_on_exit": cancel_on_exit,
                "allocate_on_miss": allocate_on_miss,
                "watch": [{"path": str(tmp / "logs"), "include": ["*.log"], "parser": "plain"}],
                # This test's own script only: any other train.py of this user (another
                # test's, a demo's) must not be taken for the job.
                "processes": {"patterns": [re.escape(str(train))], "interval_s": 0.3},
            }
        )
    )
    return tmp / "agent.yaml"


def _start_agent(cluster: dict, config: Path, env: dict[str, str] | None = None) -> Proc:
    tmp = cluster["tmp"]
    agent = Proc(
        [*JITGPU, "agent", "run", "--config", str(config)],
        log=tmp / "agent.log",
        env={"JITGPU_TOKEN": cluster["key"], **(env or {})},
    ).start()
    cluster["procs"].append(agent)
    wait_for(
        lambda: "agent for" in agent.output() or not agent.alive(),
        timeout=30,
        what="the agent to start",
    )
    assert agent.alive(), agent.output()
    return agent


def test_cue_makes_a_warm_hold_that_the_job_claims(cluster: dict) -> None:
    server, tmp = cluster["server"], cluster["tmp"]
    headers = {"Authorization": f"Bearer {cluster['key']}"}
    with (
        ChatServer() as chat,
        RecordingProxy(server.url) as proxy,
        httpx.Client(base_url=server.url, headers=headers) as http,
    ):
        # A job already running when the agent starts is no arrival: it neither allocates
        # (allocate_on_miss) nor, later, claims the hold made for the next job.
        config = _agent_config(tmp, proxy.url, llm_port=chat.port, allocate_on_miss=True)
        early = subprocess.Popen([sys.executable, str(tmp / "train.py"), "120"], cwd=tmp)
        try:
            agent = _start_agent(
                cluster,
                config,
                {"STUB_LLM_KEY": "stub-key"},
            )
            with (tmp / "logs" / "pipeline.log").open("a") as log:
                log.writelines(LINES)
            hold = wait_for(
                lambda: next(
                    (h for h in http.get("/v1/holds").json() if h["status"] == "ready"), None
                ),
                timeout=40,
                what=f"a ready hold\n{agent.output()[-3000:]}",
            )
            assert http.get("/v1/allocations").json() == []  # the early job took nothing
        finally:
            early.kill()
            early.wait()
        assert hold["source"] == "agent" and hold["gpu_count"] == 2
        job = subprocess.Popen([sys.executable, str(tmp / "train.py")], cwd=tmp)
        try:
            alloc = wait_for(
                lambda: next(iter(http.get("/v1/allocations").json()), None),
                timeout=30,
                what=f"the claim\n{agent.output()[-3000:]}",
            )
        finally:
            job.kill()
            job.wait()
        assert alloc["hold_id"] == hold["id"] and alloc["warm"] is True
        assert alloc["time_to_gpu_s"] is not None and alloc["time_to_gpu_s"] < 1.0
        assert chat.bodies, "the LLM was never asked"
        assert agent.stop() == 0, agent.output()[-3000:]
        for body in chat.bodies:
            assert not [s for s in SECRETS if s in body], body
        sent = "".join(chat.bodies)
        assert "preprocessing done (key [REDACTED:" in sent  # the excerpt went, redacted
        # The wire: every request the control plane got from the agent.
        paths = [r.split("\n", 1)[0] for r in proxy.requests]
        assert any(p.startswith("POST /v1/holds?") for p in paths), paths
        assert any(re.match(r"POST /v1/holds/\w+/claim", p) for p in paths), paths
        wire = "\n".join(proxy.requests)
        assert not [s for s in SECRETS if s in wire]
        assert not [t for t in LOG_TEXT if t in wire.lower()], wire
    server.stop()
    server_log = server.output()
    assert "/v1/holds" in server_log  # it logs requests: what it logs is checked
    assert not [s for s in SECRETS if s in server_log]
    assert not [t for t in LOG_TEXT if t in server_log.lower()]
    stored = b"".join(p.read_bytes() for p in tmp.glob("jitgpu.db*"))
    assert not [s for s in SECRETS if s.encode() in stored]
    local = sqlite3.connect(tmp / "predictions.db")
    rows = json.dumps(local.execute("SELECT * FROM cycles").fetchall())
    local.close()
    assert not [s for s in SECRETS if s in rows]
    assert os.path.exists(tmp / "predictions.db")


@pytest.mark.parametrize("cancel_on_exit", [True, False])
def test_sigterm_stops_cleanly_cancelling_holds_only_when_configured(
    cluster: dict, cancel_on_exit: bool
) -> None:
    server, tmp = cluster["server"], cluster["tmp"]
    headers = {"Authorization": f"Bearer {cluster['key']}"}
    with httpx.Client(base_url=server.url, headers=headers) as http:
        config = _agent_config(tmp, server.url, cancel_on_exit=cancel_on_exit)
        agent = _start_agent(cluster, config)
        with (tmp / "logs" / "pipeline.log").open("a") as log:
            log.write("preprocessing done\n")
        hold = wait_for(
            lambda: next(iter(http.get("/v1/holds").json()), None),
            timeout=40,
            what=f"a hold\n{agent.output()[-3000:]}",
        )
        assert agent.stop() == 0, agent.output()[-3000:]
        assert "stopped after" in agent.output()
        after = http.get(f"/v1/holds/{hold['id']}").json()
    if cancel_on_exit:
        assert after["status"] == "cancelled"
        assert "cancelled 1 hold(s) on exit" in agent.output()
    else:
        assert after["status"] in ("requested", "placed", "warming", "ready")
