"""`jitgpu login`: check a token against the server and save it (mode 0600) for later commands."""

from __future__ import annotations

import os
import sys

import typer
from rich.text import Text

from smart_agent import userconf
from smart_agent.cli.common import console, fail
from smart_agent.client import DEFAULT_SERVER, Client, JitgpuError


def login(
    server: str | None = typer.Option(
        None,
        "--server",
        envvar="JITGPU_SERVER",
        help=f"Control-plane URL to save \\[default: the saved one, else {DEFAULT_SERVER}].",
    ),
    admin: bool = typer.Option(
        False, "--admin", help="Save an admin token (for `jitgpu admin ...`), not an API key."
    ),
    check: bool = typer.Option(
        True, "--check/--no-check", help="Try the token on the server before saving it."
    ),
) -> None:
    """Save a token so that later commands need neither a variable nor an option.

    The token is read from standard input (a hidden prompt on a terminal, else the first
    line of a pipe), never from the command line, where `ps` would show it.
    """
    try:
        saved = userconf.load()
    except userconf.CredentialsError as exc:
        fail(str(exc), 2)
    what = "admin token" if admin else "API key"
    token = typer.prompt(what, hide_input=True) if sys.stdin.isatty() else sys.stdin.readline()
    token = token.strip()
    if not token:
        fail(f"no {what} given on standard input", 2)
    url = server or saved.server or DEFAULT_SERVER
    if check:
        try:
            with Client(url, token) as c:
                c.list_nodes() if admin else c.list_holds(limit=1)
        except JitgpuError as exc:
            fail(f"{url} refused the {what}: {exc.code}: {exc.message}")
    if admin:
        saved.admin_token = token
    else:
        saved.token = token
    saved.server = url
    path = str(userconf.save(saved))
    home = os.path.expanduser("~")
    shown = "~" + path[len(home) :] if path.startswith(home + os.sep) else path
    console.print(Text(f"saved the {what} for {url} in {shown} (mode 0600)"), soft_wrap=True)
