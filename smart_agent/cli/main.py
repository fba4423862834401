"""Root of the `jitgpu` command; `server`, `node` and `replay` import the server side lazily."""

from __future__ import annotations

from pathlib import Path

import typer

from smart_agent.cli import admin, resources
from smart_agent.cli.agent import agent_app
from smart_agent.cli.login import login
from smart_agent.cli.policy import policy_app
from smart_agent.cli.predictions import predictions_app

app = typer.Typer(
    name="jitgpu",
    help="Just-in-time GPUs: forecast demand, pre-warm GPUs, claim them with zero wait.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(resources.alloc_app, name="alloc")
app.add_typer(resources.hold_app, name="hold")
app.add_typer(admin.admin_app, name="admin")
app.add_typer(policy_app, name="policy")
app.add_typer(agent_app, name="agent")
app.add_typer(predictions_app, name="predictions")
app.command()(login)


@app.command()
def server(
    host: str | None = typer.Option(None, help="Address to listen on \\[default: 127.0.0.1]."),
    port: int | None = typer.Option(None, help="Port to listen on \\[default: 8080]."),
    database_url: str | None = typer.Option(
        None,
        "--database-url",
        help="sqlite:///FILE or postgresql+psycopg://...; also JITGPU_DATABASE_URL "
        "\\[default: jitgpu.db in $XDG_DATA_HOME/jitgpu, else ~/.local/share/jitgpu].",
    ),
    config: Path | None = typer.Option(
        None,
        help="YAML settings file, e.g. configs/server.yaml; a relative SQLite path in it is "
        "relative to the file's folder.",
    ),
    admin_token: str | None = typer.Option(
        None, envvar="JITGPU_ADMIN_TOKEN", help="Bearer token of the admin."
    ),
    no_jobs: bool = typer.Option(False, "--no-jobs", help="Do not run the periodic jobs."),
    role: str | None = typer.Option(
        None,
        help="all, or heartbeats: take only nodes' heartbeats, next to a main server on the "
        "same database (see docs/operations.md); also JITGPU_ROLE \\[default: all].",
    ),
    heartbeat_port: int | None = typer.Option(
        None,
        "--heartbeat-port",
        help="Also start a heartbeats-role server on this port, as a child process; node "
        "agents send their heartbeats there (docs/operations.md); also JITGPU_HEARTBEAT_PORT.",
    ),
) -> None:
    """Run the control plane (REST API and periodic jobs)."""
    from control_plane.serve import run_server

    overrides = {
        "host": host,
        "port": port,
        "database_url": database_url,
        "admin_token": admin_token,
        "run_jobs": False if no_jobs else None,
        "role": role,
        "heartbeat_port": heartbeat_port,
    }
    raise typer.Exit(run_server(config=config, overrides=overrides))


@app.command()
def migrate(
    database_url: str | None = typer.Option(
        None,
        "--database-url",
        envvar="JITGPU_DATABASE_URL",
        help="\\[default: the server's, jitgpu.db in the user's data folder].",
    ),
) -> None:
    """Bring the database to the newest schema (servers also do this when they start)."""
    from control_plane.config import default_database_url
    from control_plane.db.engine import Database, DatabaseConfigError
    from control_plane.db.migrate import current_revision, upgrade

    try:
        db = Database(database_url or default_database_url())
    except DatabaseConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    upgrade(db)
    typer.echo(f"{db.url.split('@')[-1]}: at revision {current_revision(db)}")
    db.dispose()


@app.command("slurm-bridge")
def slurm_bridge(
    server: str | None = typer.Option(
        None, "--server", envvar="JITGPU_SERVER", help="Control-plane URL."
    ),
    token: str | None = typer.Option(
        None,
        "--token",
        envvar="JITGPU_NODE_TOKEN",
        help="Enrols Slurm nodes missing from enrol_tokens (e.g. the admin token, once).",
    ),
    config: Path | None = typer.Option(None, "--config", help="configs/slurm-bridge.yaml"),
) -> None:
    """Serve jitgpu holds on a Slurm cluster: reservations, power-up, claims (docs/slurm.md)."""
    from control_plane.slurm_bridge.main import main

    raise typer.Exit(main(config, server, token))


@app.command()
def node(
    server: str | None = typer.Option(
        None, "--server", envvar="JITGPU_SERVER", help="Control-plane URL."
    ),
    heartbeat_server: str | None = typer.Option(
        None,
        "--heartbeat-server",
        envvar="JITGPU_HEARTBEAT_SERVER",
        help="URL of a heartbeats-role server for the heartbeats \\[default: --server].",
    ),
    token: str | None = typer.Option(
        None,
        "--token",
        envvar="JITGPU_NODE_TOKEN",
        help="This node's credential (jgn_..., from jitgpu admin node-token enrol).",
    ),
    enrol_token: str | None = typer.Option(
        None,
        "--enrol-token",
        envvar="JITGPU_ENROL_TOKEN",
        help="Enrolment token (jitgpu admin node-token create NAME); used once, the "
        "credential it buys is kept in state_dir.",
    ),
    name: str | None = typer.Option(None, "--name", help="Node name \\[default: host name]."),
    simulated_gpus: int | None = typer.Option(
        None,
        "--simulated-gpus",
        min=0,
        max=64,
        help="Present N simulated GPUs (forces the simulated backend).",
    ),
    gpu_model: str | None = typer.Option(None, "--gpu-model", help="Model of simulated GPUs."),
    spine: str | None = typer.Option(None, "--spine", help="Topology: spine name."),
    leaf: str | None = typer.Option(None, "--leaf", help="Topology: leaf name."),
    config: Path | None = typer.Option(None, "--config", help="configs/node-agent.yaml"),
) -> None:
    """Run the node agent on a GPU host: discover GPUs, heartbeat, warm holds, run tasks."""
    from control_plane.node_agent.main import run_node

    raise typer.Exit(
        run_node(
            server=server,
            heartbeat_server=heartbeat_server,
            token=token,
            enrol_token=enrol_token,
            name=name,
            simulated_gpus=simulated_gpus,
            gpu_model=gpu_model,
            spine=spine,
            leaf=leaf,
            config=config,
        )
    )


@app.command()
def replay(
    trace: Path = typer.Option(..., "--trace", help="Job trace CSV (schema: docs/replay.md)."),
    capacity: int = typer.Option(..., "--capacity", min=1, help="GPUs in the cluster."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=1),
    cold_start: float = typer.Option(120.0, "--cold-start", min=0, help="Seconds to warm."),
    policy: list[str] = typer.Option(
        ...,
        "--policy",
        help="default, reactive, oracle, keepalive:S, static:N, hybrid-histogram, ...",
    ),
    fmt: str = typer.Option("table", "--format", help="table or json"),
    budget: float | None = typer.Option(
        None, "--budget", help="Idle budget of --policy default (idle/busy over reactive)."
    ),
    split: str | None = typer.Option(
        None, "--split-days", help="TRAIN:TEST days: learn on the first, report the second."
    ),
) -> None:
    """Replay a job trace through the scheduling core under each pre-warm policy."""
    from control_plane.replay import TraceError, format_results, run_replay

    if fmt not in ("table", "json"):
        typer.echo(f"error: --format {fmt!r}: allowed values are table, json", err=True)
        raise typer.Exit(2)
    try:
        results = run_replay(
            trace,
            capacity,
            gpus_per_node=gpus_per_node,
            cold_start_s=cold_start,
            policies=policy,
            budget=budget,
            split=split,
        )
    except (TraceError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    print(format_results(results, fmt))


@app.command()
def demo(
    keep: bool = typer.Option(
        False, "--keep", help="Keep the cluster up afterwards, with commands to explore it."
    ),
    slurm: bool = typer.Option(
        False, "--slurm", help="Pre-warm on a throwaway Slurm cluster (needs slurm-wlm, munge)."
    ),
) -> None:
    """Run the demo: control plane, two simulated GPU nodes, the agent on a sample pipeline."""
    if slurm:
        from control_plane.slurm_bridge.demo import run_slurm_demo

        raise typer.Exit(run_slurm_demo())
    from smart_agent.demo.run import run_demo

    raise typer.Exit(run_demo(keep=keep))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
