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
from collections.abc import Callable
from pathlib import Path

import httpx
import yaml

from predictors.llm_config import settings_from_env
from smart_agent.demo.pipeline import ROUNDS, TRAIN, Round, run_pipeline

JITGPU = [sys.executable, "-m", "smart_agent.cli.main"]
WARMUP_S = 6  # the simulated cold start: loading a model, staging data
NODE_LINES = re.compile(r"warm-up|task|claimed|moved to")
# The agent runs at info level so that its log says when it is up; the terminal shows its
# event lines and warnings only.
AGENT_LINES = re.compile(r"^(?!\S+ \S+ INFO )")
COLOURS = {"user": "\033[35m", "agent": "\033[36m", "node": "\033[33m", "demo": "\033[1m"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DemoError(RuntimeError):
    """A piece of the demo did not come up, or died: the message names the log to read."""


class Demo:
    def __init__(self, folder: Path, *, colour: bool) -> None:
        self.folder = folder
        self.colour = colour
        self.procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []
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
        quiet: bool = False,
    ) -> subprocess.Popen:
        """Start a piece; all it prints goes to `<who>.log`, and (unless `quiet`) the lines
        matching `keep` are shown as they come."""
        log = self.folder / f"{who}.log"
        proc = subprocess.Popen(
            args,
            stdout=log.open("wb") if quiet else subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            start_new_session=True,
        )
        self.procs.append((who, proc, log))
        if not quiet:
            threading.Thread(target=self._relay, args=(proc, who, keep, log), daemon=True).start()
        return proc

    def _relay(
        self, proc: subprocess.Popen[bytes], who: str, keep: re.Pattern[str] | None, log: Path
    ) -> None:
        assert proc.stdout is not None
        with log.open("wb") as out:
            for raw in proc.stdout:
                out.write(raw)
                out.flush()
                line = raw.decode(errors="replace").rstrip()
                if line and (keep is None or keep.search(line)):
                    # Drop the child's own timestamp and level: the demo prints its own.
                    line = re.sub(r"^\S+ \S+ (INFO|WARNING|ERROR) \S+: ", "", line)
                    line = re.sub(r"^\d\d:\d\d:\d\d ", "", line)
                    self.say(who, line)

    def check_alive(self) -> None:
        """Every piece is still running, or DemoError naming the one that stopped."""
        for who, proc, log in self.procs:
            code = proc.poll()
            if code is not None:
                raise DemoError(f"the {who} exited with status {code}; read {log}")

    def wait_until(
        self, check: Callable[[], object], *, timeout: float, what: str, log: str
    ) -> None:
        """Poll `check` until it is true; DemoError naming `log` after `timeout` seconds or
        as soon as a piece dies."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            try:
                if check():
                    return
            except (httpx.HTTPError, OSError, ValueError):
                pass
            if time.monotonic() >= deadline:
                raise DemoError(f"{what} within {timeout:.0f}s; read {self.folder / log}")
            time.sleep(0.2)

    def stop_all(self) -> None:
        # Last started, first stopped, one at a time: the agent cancels its holds on the way
        # out, which needs the server still up.
        for _, proc, _ in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _configs(demo: Demo, key_env: str) -> Path:
    folder = demo.folder
    (folder / "logs").mkdir()
    llm = settings_from_env()
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
        "predictors": ["burst", "cues", "histogram"] + (["llm"] if "model" in llm else []),
        "warmup": {"default": "demo"},
    }
    if "model" in llm:
        policy["llm"] = {"calls_per_hour": 60, "usd_per_day": 0.5, **llm}
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
        # The demo's own train.py only: another train.py of this user is not the demo's job.
        "processes": {"patterns": [re.escape(str(TRAIN))], "interval_s": 0.5},
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


def run_demo(
    keep: bool = False,
    *,
    rounds: tuple[Round, ...] = ROUNDS,
    folder: Path | None = None,
    epoch_s: float = 2.5,
    pause_s: float = 2.0,
    settle_s: float = 2.0,
    start_timeout_s: float = 60.0,
    explore: Callable[[Path], None] | None = None,
) -> int:
    """Run the demo in a fresh folder of its own; 0 when it ran to the end, 1 when a piece
    failed (its log is named), 130 on Ctrl-C. With `keep` the cluster stays up after the
    story, with the commands to explore it printed, until Ctrl-C (or until `explore`, given
    the env file, returns). `rounds` and the timings let a test run it short."""
    folder = folder or Path(tempfile.mkdtemp(prefix="jitgpu-demo-"))
    demo = Demo(folder, colour=sys.stdout.isatty())
    main = threading.current_thread() is threading.main_thread()
    # A `kill` stops the pieces too, as Ctrl-C does, rather than leaving them running.
    before = signal.signal(signal.SIGTERM, _interrupt) if main else None
    demo.say("demo", f"this run's folder (logs, prediction log): {folder}")
    failed = False
    try:
        key = _run(
            demo,
            rounds,
            epoch_s=epoch_s,
            pause_s=pause_s,
            settle_s=settle_s,
            start_timeout_s=start_timeout_s,
        )
        if keep:
            _stay_up(demo, key, explore)
    except DemoError as exc:
        demo.say("demo", f"error: {exc}")
        failed = True
    except KeyboardInterrupt:
        if not keep:
            demo.say("demo", "interrupted")
            return 130
        demo.say("demo", "stopping the cluster")
    finally:
        demo.stop_all()
        if main:
            signal.signal(signal.SIGTERM, before)
    shutil.rmtree(folder / "cache", ignore_errors=True)
    if failed:
        demo.say("demo", f"read the logs in {folder}")
        return 1
    log = folder / "predictions.db"
    if log.exists():
        jitgpu = _jitgpu_command()
        demo.say("demo", f"review: {jitgpu} predictions score --log {log}")
        demo.say("demo", f"        {jitgpu} predictions report --log {log} --out report.html")
    return 0


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def _jitgpu_command() -> str:
    """How the user runs `jitgpu` from here: the venv's script, relative when it is below."""
    script = Path(sys.executable).parent / "jitgpu"
    if not script.exists():
        return "jitgpu"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def _stay_up(demo: Demo, key: str, explore: Callable[[Path], None] | None) -> None:
    """Leave the cluster running and say how to use it; an env file holds the tokens."""
    env = demo.folder / "env"
    fd = os.open(env, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(
            f"export JITGPU_SERVER={demo.url}\n"
            f"export JITGPU_TOKEN={key}\n"
            f"export JITGPU_ADMIN_TOKEN={demo.admin_token}\n"
        )
    jitgpu = _jitgpu_command()
    demo.say("demo", "-" * 60)
    demo.say("demo", "the cluster stays up; in another shell:")
    for line in (
        f". {env}",
        f"{jitgpu} alloc list",
        f"{jitgpu} hold create 2 --wait",
        f"{jitgpu} alloc create 2",
        f"{jitgpu} admin nodes",
        f"{demo.url}/docs  (API page; Authorize with $JITGPU_TOKEN)",
    ):
        demo.say("demo", f"  {line}")
    demo.say("demo", "Ctrl-C here stops it")
    if explore is not None:
        explore(env)
        return
    while True:
        demo.check_alive()
        time.sleep(1.0)


def _run(
    demo: Demo,
    rounds: tuple[Round, ...],
    *,
    epoch_s: float,
    pause_s: float,
    settle_s: float,
    start_timeout_s: float,
) -> str:
    """The story, start to summary; returns the demo tenant's API key."""
    folder = demo.folder
    port = demo.url.rsplit(":", 1)[1]
    demo.spawn(
        [*JITGPU, "server", "--port", port, "--database-url", f"sqlite:///{folder / 'jitgpu.db'}"],
        "server",
        quiet=True,
        env={
            "JITGPU_ADMIN_TOKEN": demo.admin_token,
            "JITGPU_JOBS_INTERVAL_S": "1",
            "JITGPU_LOG_FORMAT": "text",
        },
    )
    demo.wait_until(
        lambda: httpx.get(f"{demo.url}/readyz", timeout=2).status_code == 200,
        timeout=start_timeout_s,
        what="the control plane did not answer",
        log="server.log",
    )
    demo.say("demo", f"control plane ready on {demo.url} (SQLite)")
    with httpx.Client(
        base_url=demo.url, timeout=10, headers={"Authorization": f"Bearer {demo.admin_token}"}
    ) as admin:
        tenant = admin.post("/v1/tenants", json={"name": "alice", "quota_gpus": 8}).json()
        key = admin.post(f"/v1/tenants/{tenant['id']}/api-keys").json()["key"]
        agent_config = _configs(demo, "JITGPU_DEMO_TOKEN")
        for i in (1, 2):
            # Each node enrols with its own single-use token and keeps the credential it gets.
            enrol = admin.post("/v1/node-tokens", json={"node_name": f"sim-{i}"}).json()["key"]
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
                env={"JITGPU_ENROL_TOKEN": enrol},
                keep=NODE_LINES,
            )
        demo.wait_until(
            lambda: len(admin.get("/v1/gpus").json()) >= 8,
            timeout=start_timeout_s,
            what="the two node agents did not register their 8 simulated GPUs",
            log="node-1.log",
        )
    demo.say(
        "demo",
        "two node agents online with 4 simulated A100 each "
        f"(warm-up profile 'demo': {WARMUP_S}s cold start)",
    )
    agent_log = folder / "agent.log"
    demo.spawn(
        [*JITGPU, "agent", "run", "--config", str(agent_config), "--log-level", "info"],
        "agent",
        env={"JITGPU_DEMO_TOKEN": key},
        keep=AGENT_LINES,
    )
    demo.wait_until(
        lambda: "jitgpu.agent: agent for " in agent_log.read_text(errors="replace"),
        timeout=start_timeout_s,
        what="the smart agent did not start",
        log="agent.log",
    )
    run_pipeline(
        folder / "logs",
        lambda text: demo.say("user", text),
        rounds=rounds,
        epoch_s=epoch_s,
        pause_s=pause_s,
        check=demo.check_alive,
    )
    time.sleep(settle_s)  # the agent sees the last job end and learns the last outcomes
    demo.check_alive()
    _summary(demo)
    return key
