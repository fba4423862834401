"""`jitgpu policy check|show`: validate a pre-warm policy, and show the limits in effect."""

from __future__ import annotations

import json
from pathlib import Path

import typer
import yaml
from rich.text import Text

from smart_agent.cli.common import JsonOpt, ServerOpt, TokenOpt, client, console
from smart_agent.policy import Policy
from smart_agent.yamlconf import ConfigError, load_model

policy_app = typer.Typer(
    help="Pre-warm policy: validate it and show what is in effect.", no_args_is_help=True
)


def _load(path: Path) -> Policy:
    try:
        return load_model(Policy, path)
    except ConfigError as exc:
        for problem in exc.problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(1) from None


@policy_app.command("check")
def check(
    path: Path = typer.Argument(..., help="configs/prewarm-policy.yaml"), as_json: bool = JsonOpt
) -> None:
    """Validate a policy file; print the effective policy with every default filled in."""
    policy = _load(path)
    data = policy.model_dump(mode="json")
    if as_json:
        print(json.dumps(data, indent=2))
        return
    console.print(
        f"[green]ok[/green]: {path} is a valid pre-warm policy; in effect:", highlight=False
    )
    print(yaml.safe_dump(data, sort_keys=False).rstrip())


@policy_app.command("show")
def show(
    path: Path | None = typer.Option(None, "--file", help="Local policy file, if any."),
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Show the server-side budget of your tenant (and the local policy, with --file)."""
    with client(server, token) as c:
        me = c.whoami()
        remote = c.get_policy(me.id)
    out = {"server": remote.model_dump(mode="json")}
    if path is not None:
        out["local"] = _load(path).model_dump(mode="json")
    if as_json:
        print(json.dumps(out, indent=2))
        return
    console.print(
        Text(f"server-side policy of tenant {me.name}", style="bold")
        + Text(" (enforced on every hold)")
    )
    print(yaml.safe_dump(out["server"], sort_keys=False).rstrip())
    if "local" in out:
        console.print(Text("\nlocal policy", style="bold") + Text(f" ({path})"))
        print(yaml.safe_dump(out["local"], sort_keys=False).rstrip())
