"""The product end to end, real processes on 127.0.0.1: control plane, a simulated node
agent, the smart agent. Cue lines in a watched log make a hold that becomes ready; the job
starting claims it with time-to-GPU near 0; planted secrets reach neither the LLM nor the
control plane."""

from __future__ import annotations

import json
import os
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
from fastapi import FastAPI, Request

from tests.conftest import ADMIN_TOKEN
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


class ChatServer:
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

        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ChatServer:
        self.thread.start()
        wait_for(lambda: self.server.started, timeout=20, what="the chat server")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


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
            node_token = admin.post("/v1/node-tokens").json()["key"]
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
            env={"JITGPU_NODE_TOKEN": node_token},
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


def _agent_config(tmp: Path, server: ServerProc, llm_port: int) -> Path:
    (tmp / "logs").mkdir()
    (tmp / "policy.yaml").write_text(
        yaml.safe_dump(
            {
                "min_confidence": 0.5,
                "lead_s": 0,
                "hold_ttl_s": 300,
                "predictors": ["llm"],
                "ensemble": "off",
                "warmup": {"default": "quick"},
                "max_gpus_per_hold": 2,
                "llm": {
                    "model": "openai/stub",
                    "api_base": f"http://127.0.0.1:{llm_port}/v1",
                    "api_key_env": "STUB_LLM_KEY",
                    "calls_per_hour": 100,
                },
            }
        )
    )
    (tmp / "agent.yaml").write_text(
        yaml.safe_dump(
            {
                "server": server.url,
                "token_env": "JITGPU_TOKEN",
                "policy": "policy.yaml",
                "prediction_log": str(tmp / "predictions.db"),
                "cycle_s": 3600,
                "reconcile_s": 1,
                "debounce_s": 0.5,
                "poll_s": 0.2,
                "watch": [{"path": str(tmp / "logs"), "include": ["*.log"], "parser": "plain"}],
                "processes": {"patterns": [r"train\.py"], "interval_s": 0.3},
            }
        )
    )
    (tmp / "train.py").write_text("import time\ntime.sleep(6)\n")
    return tmp / "agent.yaml"


def test_cue_makes_a_warm_hold_that_the_job_claims(cluster: dict) -> None:
    server, tmp = cluster["server"], cluster["tmp"]
    headers = {"Authorization": f"Bearer {cluster['key']}"}
    with ChatServer() as chat, httpx.Client(base_url=server.url, headers=headers) as http:
        config = _agent_config(tmp, server, chat.port)
        agent = Proc(
            [*JITGPU, "agent", "run", "--config", str(config)],
            log=tmp / "agent.log",
            env={
                "JITGPU_TOKEN": cluster["key"],
                "STUB_LLM_KEY": "stub-key",
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            },
        ).start()
        cluster["procs"].append(agent)
        wait_for(
            lambda: "agent for" in agent.output() or "watching" in agent.output(),
            timeout=30,
            what="the agent to start",
        )
        with (tmp / "logs" / "pipeline.log").open("a") as log:
            log.writelines(LINES)
        hold = wait_for(
            lambda: next((h for h in http.get("/v1/holds").json() if h["status"] == "ready"), None),
            timeout=40,
            what=f"a ready hold\n{agent.output()[-3000:]}",
        )
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
        assert alloc["hold_id"] == hold["id"] and alloc["warm"] is True
        assert alloc["time_to_gpu_s"] is not None and alloc["time_to_gpu_s"] < 1.0
        assert chat.bodies, "the LLM was never asked"
        agent.stop()
        for body in chat.bodies:
            assert not [s for s in SECRETS if s in body], body
        sent = "".join(chat.bodies)
        assert "preprocessing done (key [REDACTED:" in sent  # the excerpt went, redacted
    server.stop()
    stored = b"".join(p.read_bytes() for p in tmp.glob("jitgpu.db*"))
    assert not [s for s in SECRETS if s.encode() in stored]
    local = sqlite3.connect(tmp / "predictions.db")
    rows = json.dumps(local.execute("SELECT * FROM cycles").fetchall())
    local.close()
    assert not [s for s in SECRETS if s in rows]
    assert os.path.exists(tmp / "predictions.db")
