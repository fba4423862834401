"""Options and output shared by the client commands: server, token, JSON or rich tables."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from smart_agent.client import Client, JitgpuError

console = Console()
err_console = Console(stderr=True)

ServerOpt = typer.Option(
    None,
    "--server",
    envvar="JITGPU_SERVER",
    help="Control-plane URL [default: http://127.0.0.1:8080].",
)
TokenOpt = typer.Option(None, "--token", envvar="JITGPU_TOKEN", help="API key (bearer token).")
JsonOpt = typer.Option(False, "--json", help="Print JSON instead of a table.")


@contextmanager
def client(server: str | None, token: str | None) -> Iterator[Client]:
    """A client whose errors end the command with a one-line message and exit status 1."""
    try:
        with Client(server, token) as c:
            yield c
    except JitgpuError as exc:
        where = f" (field {exc.field})" if exc.field else ""
        err_console.print(f"[red]error:[/red] {exc.code}: {exc.message}{where}")
        raise typer.Exit(1) from None


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value) or "-"
    return str(value)


def emit(
    items: BaseModel | Sequence[BaseModel],
    *,
    as_json: bool,
    columns: Sequence[tuple[str, Callable[[Any], Any]]],
    title: str | None = None,
) -> None:
    many = not isinstance(items, BaseModel)
    rows = list(items) if many else [items]
    if as_json:
        data = [r.model_dump(mode="json") for r in rows]
        print(json.dumps(data if many else data[0], indent=2))
        return
    cells = [[_cell(get(row)) for _, get in columns] for row in rows]
    table = Table(title=title, show_lines=False)
    for i, (name, _) in enumerate(columns):
        if name == "id":
            # An id is what the user copies into the next command: never cut it short.
            width = max((len(r[i]) for r in cells), default=len(name))
            table.add_column(name, no_wrap=True, min_width=width)
        else:
            table.add_column(name, overflow="fold")
    for row_cells in cells:
        table.add_row(*row_cells)
    console.print(table)
