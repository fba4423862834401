"""Root of the `jitgpu` command; `server`, `node` and `replay` import the server side lazily."""

from __future__ import annotations

from pathlib import Path

import typer

from smart_agent.cli import admin, resources

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


@app.command()
def server(
    host: str | None = typer.Option(None, help="Address to listen on [default: 127.0.0.1]."),
    port: int | None = typer.Option(None, help="Port to listen on [default: 8080]."),
    database_url: str | None = typer.Option(
        None,
        "--database-url",
        help="sqlite:///FILE (default sqlite:///jitgpu.db) or "
        "postgresql+psycopg://...; also JITGPU_DATABASE_URL.",
    ),
    config: Path | None = typer.Option(None, help="YAML settings file (configs/server.yaml)."),
    admin_token: str | None = typer.Option(
        None, envvar="JITGPU_ADMIN_TOKEN", help="Bearer token of the admin."
    ),
    no_jobs: bool = typer.Option(False, "--no-jobs", help="Do not run the periodic jobs."),
) -> None:
    """Run the control plane (REST API and periodic jobs)."""
    from control_plane.serve import run_server

    overrides = {
        "host": host,
        "port": port,
        "database_url": database_url,
        "admin_token": admin_token,
        "run_jobs": False if no_jobs else None,
    }
    raise typer.Exit(run_server(config=config, overrides=overrides))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
