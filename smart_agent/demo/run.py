"""The one-command demo: a control plane on SQLite, two node agents with simulated GPUs, and
the smart agent on a pipeline that a generator plays; every step is printed as it happens."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import IO

import httpx
import yaml

from smart_agent.demo.pipeline import ROUNDS, run_pipeline

JITGPU = [sys.executable, "-m", "smart_agent.cli.main"]
WARMUP_S = 6  # the simulated cold start: loading a model, staging data
NODE_LINES = re.compile(r"warm-up|task|claimed|moved to")
COLOURS = {"user": "\033[35m", "agent": "\033[36m", "node": "\033[33m", "demo": "\033[1m"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Demo:
    def __init__(self, folder: Path, *, colour: bool) -> None:
        self.folder = folder
        self.colour = colour
        self.procs: list[subprocess.Popen[bytes]] = []
        self.lock = threading.Lock()
        self.admin_token = secrets.token_urlsafe(24)
        self.url = f"http://127.0.0.1:{_free_port()}"

    def say(self, who: str, text: str) -> None:
        tag = f"[{who:<6}]"
        if self.colour:
            tag = COLOURS.get(who.split("-")[0], "") + tag + "\033[0m"
        with self.lock:
            print(f"{time.strftime('%H:%M:%S')} {tag} {text}", flush=True)

    def spawn(
        self,
        args: list[str],
        who: str,
        *,
        env: dict[str, str] | None = None,
        keep: re.Pattern[str] | None = None,
        log: str | None = None,
    ) -> subprocess.Popen:
        out: IO[bytes] | int = subprocess.PIPE
        if log is not None:
            out = (self.folder / log).open("wb")
        proc = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            start_new_session=True,
        )
        self.procs.append(proc)
        if log is None:
            threading.Thread(target=self._relay, args=(proc, who, keep), daemon=True).start()
        return proc

    def _relay(self, proc: subprocess.Popen[bytes], who: str, keep: re.Pattern[str] | None) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if line and (keep is None or keep.search(line)):
                # Drop the child's own timestamp and level: the demo prints its own.
                line = re.sub(r"^\S+ \S+ (INFO|WARNING|ERROR) \S+: ", "", line)
                line = re.sub(r"^\d\d:\d\d:\d\d ", "", line)
                self.say(who, line)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the control plane did not start; see {self.folder / 'server.log'}")


def _configs(demo: Demo, key_env: str) -> Path:
    folder = demo.folder
    (folder / "logs").mkdir()
    llm = os.environ.get("JITGPU_LLM_MODEL")
    policy = {
        "min_confidence": 0.3,
        "lead_s": 30,
        "hold_ttl_s": 90,
        "max_horizon_s": 600,
        "max_gpus_per_hold": 4,
        "max_gpus_total": 8,
        "daily_idle_gpu_hours": 2,
        "cooldown_s": {"default": 20},
        "cancel_below": 0.05,
        "predictors": ["burst", "cues", "histogram"] + (["llm"] if llm else []),
        "warmup": {"default": "demo"},
    }
    if llm:
        policy["llm"] = {"model": llm, "calls_per_hour": 60, "usd_per_day": 0.5}
    (folder / "prewarm-policy.yaml").write_text(yaml.safe_dump(policy))
    agent = {
        "server": demo.url,
        "token_env": key_env,
        "policy": "prewarm-policy.yaml",
        "prediction_log": str(folder / "predictions.db"),
        "cycle_s": 15,
        "reconcile_s": 2,
        "debounce_s": 2,
        "allocate_on_miss": True,
        "cancel_on_exit": True,
        "watch": [{"path": str(folder / "logs"), "include": ["*.log"], "parser": "plain"}],
        "processes": {"patterns": [r"train\.py"], "interval_s": 0.5},
    }
    (folder / "agent.yaml").write_text(yaml.safe_dump(agent))
    node = {
        "heartbeat_interval_s": 1,
        "cache_dir": str(folder / "cache"),
        "warmup_profiles": {"demo": [{"command": f"sleep {WARMUP_S}", "timeout_s": 60}]},
    }
    (folder / "node.yaml").write_text(yaml.safe_dump(node))
    return folder / "agent.yaml"


def _summary(demo: Demo) -> None:
    db = sqlite3.connect(demo.folder / "predictions.db")
    jobs = db.execute("SELECT warm, time_to_gpu_s, hold_id FROM jobs ORDER BY at").fetchall()
    holds = db.execute(
        "SELECT outcome, COUNT(*), COALESCE(SUM(idle_gpu_minutes), 0) FROM "
        "forecasts WHERE hold_id IS NOT NULL GROUP BY outcome"
    ).fetchall()
    db.close()
    admin = {"Authorization": f"Bearer {demo.admin_token}"}
    warmups = [
        h["warmup_s"]
        for h in httpx.get(f"{demo.url}/v1/holds?limit=1000", headers=admin).json()
        if h["warmup_s"]
    ]
    cold = statistics.mean(warmups) if warmups else float(WARMUP_S)
    ttgs = [t for _, t, _ in jobs if t is not None]
    warm = sum(1 for w, _, _ in jobs if w)
    idle = sum(minutes for _, _, minutes in holds)
    demo.say("demo", "-" * 60)
    demo.say(
        "demo",
        f"jobs: {len(jobs)}; started on warm GPUs: {warm} ({warm / len(jobs):.0%})"
        if jobs
        else "jobs: 0",
    )
    if ttgs:
        demo.say(
            "demo",
            f"mean time-to-GPU with pre-warming: {statistics.mean(ttgs):.1f}s; "
            f"without: {cold:.1f}s per job (the measured cold start)",
        )
    demo.say(
        "demo",
        "holds: " + ", ".join(f"{n} {o}" for o, n, _ in holds) + f"; idle GPU-minutes: {idle:.1f}",
    )


def run_demo(keep: bool = False) -> int:
    folder = Path(tempfile.mkdtemp(prefix="jitgpu-demo-"))
    demo = Demo(folder, colour=sys.stdout.isatty())
    demo.say("demo", f"working folder {folder}")
    try:
        port = demo.url.rsplit(":", 1)[1]
        demo.spawn(
            [
                *JITGPU,
                "server",
                "--port",
                port,
                "--database-url",
                f"sqlite:///{folder / 'jitgpu.db'}",
            ],
            "server",
            log="server.log",
            env={
                "JITGPU_ADMIN_TOKEN": demo.admin_token,
                "JITGPU_JOBS_INTERVAL_S": "1",
                "JITGPU_LOG_FORMAT": "text",
            },
        )
        demo.wait_ready()
        demo.say("demo", f"control plane ready on {demo.url} (SQLite)")
        admin = httpx.Client(
            base_url=demo.url, timeout=10, headers={"Authorization": f"Bearer {demo.admin_token}"}
        )
        tenant = admin.post("/v1/tenants", json={"name": "alice", "quota_gpus": 8}).json()
        key = admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
        node_token = admin.post("/v1/node-tokens").json()["key"]
        agent_config = _configs(demo, "JITGPU_DEMO_TOKEN")
        for i in (1, 2):
            demo.spawn(
                [
                    *JITGPU,
                    "node",
                    "--server",
                    demo.url,
                    "--name",
                    f"sim-{i}",
                    "--simulated-gpus",
                    "4",
                    "--gpu-model",
                    "A100",
                    "--leaf",
                    "leaf0",
                    "--config",
                    str(folder / "node.yaml"),
                ],
                f"node-{i}",
                env={"JITGPU_NODE_TOKEN": node_token},
                keep=NODE_LINES,
            )
        while len(admin.get("/v1/gpus").json()) < 8:
            time.sleep(0.2)
        demo.say(
            "demo",
            "two node agents online with 4 simulated A100 each "
            f"(warm-up profile 'demo': {WARMUP_S}s cold start)",
        )
        demo.spawn(
            [*JITGPU, "agent", "run", "--config", str(agent_config), "--log-level", "warning"],
            "agent",
            env={"JITGPU_DEMO_TOKEN": key},
        )
        time.sleep(2)
        run_pipeline(folder / "logs", lambda text: demo.say("user", text), rounds=ROUNDS)
        time.sleep(3)
        _summary(demo)
        admin.close()
    except KeyboardInterrupt:
        demo.say("demo", "interrupted")
        return 130
    finally:
        demo.stop_all()
        log = _keep_log(folder, keep)
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    if log is not None:
        demo.say("demo", f"review: jitgpu predictions score --log {log}")
        demo.say("demo", f"        jitgpu predictions report --log {log} --out report.html")
    return 0


def _keep_log(folder: Path, keep: bool) -> Path | None:
    """The prediction log outlives the working folder, so that the review line works."""
    log = folder / "predictions.db"
    if keep or not log.exists():
        return log if log.exists() else None
    kept = Path(tempfile.gettempdir()) / "jitgpu-demo-predictions.db"
    # The backup API copies a consistent database, WAL included, where a file copy may not.
    with closing(sqlite3.connect(log)) as src, closing(sqlite3.connect(kept)) as dst:
        src.backup(dst)
    return kept
