"""`jitgpu agent run|status`: the smart agent as a foreground daemon, and what it has done."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from pathlib import Path

import typer
from rich.text import Text

from smart_agent.cli.common import console
from smart_agent.cli.inspect_cmd import inspect_files

agent_app = typer.Typer(
    help="The smart agent: watch logs, forecast, pre-warm, claim.", no_args_is_help=True
)
ConfigOpt = typer.Option(
    None,
    "--config",
    help="Agent config; paths in it are relative to its folder "
    "\\[default: smart-agent.yaml in $XDG_CONFIG_HOME/jitgpu, else ~/.config/jitgpu].",
)


def config_path(given: Path | None) -> Path:
    """The config given, else the user's; never a path relative to the working directory."""
    if given is not None:
        return given
    from smart_agent.userconf import config_dir

    path = config_dir() / "smart-agent.yaml"
    if not path.exists():
        typer.echo(
            f"error: no agent config at {path}: copy configs/smart-agent.yaml (and "
            "configs/prewarm-policy.yaml) there, or give --config FILE",
            err=True,
        )
        raise typer.Exit(2)
    return path


agent_app.command("inspect")(inspect_files)


def printer(kind: str, data: dict) -> None:
    """One readable line per thing the agent does (the demo and a foreground run show it)."""
    stamp = time.strftime("%H:%M:%S")
    if kind == "forecast" and "already covers" in data["decision"]:
        return  # the same expectation again, next cycle: nothing new to say
    if kind == "forecast":
        text = (
            f"forecast  {data['predictor']}: {data['gpus']} GPU(s) in {data['in_s']}s, "
            f"p={data['confidence']:.2f} -> {data['decision']}"
        )
    elif kind == "hold":
        text = (
            f"hold      {data['hold']}: {data['gpus']} GPU(s), {data['status']}, "
            f"job expected in {data['start_in_s']}s"
        )
    elif kind == "job":
        ttg = data["time_to_gpu_s"]
        how = (
            ("warm, claimed " + data["hold"])
            if data["warm"]
            else ("claimed a warming hold" if data["hold"] else "no hold (cold)")
        )
        text = f"job       {data['job']} ({data['gpus']} GPU(s)): {how}; time-to-GPU " + (
            f"{ttg:.1f}s" if ttg is not None else "pending warm-up"
        )
    elif kind == "ready":
        text = f"ready     {data['allocation']}: time-to-GPU {data['time_to_gpu_s']:.1f}s"
    elif kind == "outcome":
        text = f"outcome   {data['hold']}: {data['outcome']}"
    elif kind == "refused":
        text = f"refused   by the server: {data['code']}: {data['message']}"
    elif kind == "cancel":
        text = f"cancel    {data['hold']}: no forecast supports it any more"
    else:
        text = f"{kind:<9} {data}"
    # Text, not markup: a server's message or a log line may hold [brackets] of its own.
    console.print(Text(stamp, style="dim") + Text(" " + text), highlight=False, soft_wrap=True)


@agent_app.command("run")
def run(
    config: Path | None = ConfigOpt,
    quiet: bool = typer.Option(False, "--quiet", help="Log only, no event lines."),
    log_level: str = typer.Option("info", "--log-level"),
) -> None:
    """Run the agent in the foreground until SIGTERM or Ctrl-C."""
    from smart_agent.config import load_agent_config
    from smart_agent.runner import Runner
    from smart_agent.yamlconf import ConfigError

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in () if log_level.lower() == "debug" else ("httpx", "apscheduler"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        cfg, policy = load_agent_config(config_path(config))
        runner = Runner(cfg, policy, notify=None if quiet else printer)
    except ConfigError as exc:
        for problem in exc.problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2) from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    runner.start()
    stop.wait()
    runner.stop()
    typer.echo(f"stopped after {runner.cycles} cycle(s)", err=True)


@agent_app.command("status")
def status(config: Path | None = ConfigOpt) -> None:
    """What the agent has done: holds pending, today's idle GPU-hours, recent decisions."""
    from smart_agent.config import load_agent_config
    from smart_agent.idle_steer import STEER_META_KEY, realised
    from smart_agent.predlog import PredictionLog
    from smart_agent.runner import UNRECOGNIZED_KEY
    from smart_agent.yamlconf import ConfigError

    try:
        cfg, _ = load_agent_config(config_path(config))
    except ConfigError as exc:
        for problem in exc.problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2) from None
    log = PredictionLog(cfg.prediction_log)
    try:
        unrecognized = json.loads(log.get_meta(UNRECOGNIZED_KEY) or "[]")
        steer = json.loads(log.get_meta(STEER_META_KEY) or "null")
        now_real = realised(log, time.time(), window_s=steer["window_s"]) if steer else None
        pending = log.pending_holds()
        day = time.time() - 86400
        rows = log.query(
            "SELECT decision, COUNT(*) AS n FROM forecasts WHERE made_at >= ? GROUP BY decision",
            (day,),
        )
        jobs = log.query("SELECT COUNT(*) AS n, SUM(warm) AS warm FROM jobs WHERE at >= ?", (day,))[
            0
        ]
    finally:
        log.close()
    console.print(Text(f"prediction log: {cfg.prediction_log}"), soft_wrap=True)
    console.print(
        f"holds pending: {len(pending)} ({sum(r['hold_gpus'] or 0 for r in pending)} GPUs)"
    )
    console.print(
        "last 24 h: "
        + ", ".join(f"{r['n']} {r['decision']}" for r in rows)
        + f"; jobs {jobs['n']} ({jobs['warm'] or 0} warm)"
    )
    if steer and now_real is not None:
        # The budget next to what was realised, so an operator sees whether it holds.
        ratio = "n/a (no busy time)" if now_real.ratio is None else f"{now_real.ratio:.4f}"
        console.print(
            f"idle budget {steer['budget']}: realised {ratio} over the last "
            f"{now_real.window_s / 3600:g} h ({now_real.idle_gpu_s / 3600:.2f} idle GPU-h, "
            f"{now_real.busy_gpu_s / 3600:.2f} busy GPU-h); price {steer['price']:.4g}",
            highlight=False,
        )
    if unrecognized:
        console.print(
            "not recognized (no line understood; see `jitgpu agent inspect FILE`): "
            + ", ".join(unrecognized),
            highlight=False,
        )
