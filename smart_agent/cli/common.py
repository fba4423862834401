"""Options and output shared by the client commands: server, token, JSON or rich tables."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NoReturn

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table
from rich.text import Text

from smart_agent import userconf
from smart_agent.client import DEFAULT_SERVER, Client, JitgpuError

console = Console()
err_console = Console(stderr=True)

ServerOpt = typer.Option(
    None,
    "--server",
    envvar="JITGPU_SERVER",
    help=f"Control-plane URL \\[default: the one `jitgpu login` saved, else {DEFAULT_SERVER}].",
)
TokenOpt = typer.Option(
    None,
    "--token",
    envvar="JITGPU_TOKEN",
    show_envvar=True,
    help="Tenant API key \\[default: the one `jitgpu login` saved]. Prefer the variable: "
    "an option shows in `ps`.",
)
AdminTokenOpt = typer.Option(
    None,
    "--token",
    envvar="JITGPU_ADMIN_TOKEN",
    show_envvar=True,
    help="Admin token \\[default: the one `jitgpu login --admin` saved]. Prefer the "
    "variable: an option shows in `ps`.",
)
JsonOpt = typer.Option(False, "--json", help="Print JSON instead of a table.")
WideOpt = typer.Option(False, "--wide", help="Show every column, however wide.")


def fail(message: str, code: int = 1) -> NoReturn:
    """End the command with `error: message` on stderr, the message printed as it is."""
    err_console.print(Text("error: ", style="red") + Text(message), soft_wrap=True)
    raise typer.Exit(code)


def resolve(server: str | None, token: str | None, *, admin: bool) -> tuple[str, str]:
    """Server and token from the option or variable, else from `jitgpu login`'s file."""
    try:
        saved = userconf.load()
    except userconf.CredentialsError as exc:
        fail(str(exc), 2)
    server = server or saved.server or DEFAULT_SERVER
    token = token or (saved.admin_token if admin else saved.token)
    if not token and admin:
        fail("no admin token: set JITGPU_ADMIN_TOKEN or run `jitgpu login --admin`", 2)
    if not token:
        fail("no API key: set JITGPU_TOKEN or run `jitgpu login`", 2)
    return server, token


@contextmanager
def client(server: str | None, token: str | None, *, admin: bool = False) -> Iterator[Client]:
    """A client whose errors end the command with a one-line message and exit status 1."""
    server, token = resolve(server, token, admin=admin)
    try:
        with Client(server, token) as c:
            yield c
    except JitgpuError as exc:
        where = f" (field {exc.field})" if exc.field else ""
        # Printed as the server wrote it: a pattern such as [0-9a-f] is text, not markup.
        fail(f"{exc.code}: {exc.message}{where}")


def _cell(value: Any, now: datetime | None = None) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        local = value.astimezone()
        # Today's times as HH:MM:SS: a table of them fits 80 columns.
        if now is not None and local.date() == now.date():
            return local.strftime("%H:%M:%S")
        return local.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, list):
        return ", ".join(_cell(v, now) for v in value) or "-"
    return str(value)


def _table_width(widths: Sequence[int]) -> int:
    # rich's default box: one space of padding each side and a rule between and around.
    return sum(widths) + 3 * len(widths) + 1


def fit_columns(names: Sequence[str], cells: Sequence[Sequence[str]], width: int) -> int:
    """How many leading columns fit `width` at their natural widths (at least two)."""
    widths = [max([len(n)] + [len(r[i]) for r in cells]) for i, n in enumerate(names)]
    shown = len(names)
    while shown > 2 and _table_width(widths[:shown]) > width:
        shown -= 1
    return shown


Columns = Sequence[tuple[str, Callable[[Any], Any]]]


def emit(
    items: BaseModel | Sequence[BaseModel],
    *,
    as_json: bool,
    columns: Columns,
    title: str | None = None,
    wide: bool = False,
    details: Columns = (),
) -> None:
    """JSON, one object as `name: value` lines, or a table that fits the terminal.

    Columns are in order of importance: those that do not fit are left out (and named),
    unless `wide`.
    """
    many = not isinstance(items, BaseModel)
    rows = list(items) if many else [items]
    if as_json:
        data = [r.model_dump(mode="json") for r in rows]
        print(json.dumps(data if many else data[0], indent=2))
        return
    now = datetime.now().astimezone()
    if not many:
        for name, get in (*columns, *details):
            line = Text(f"{name + ':':<15}", style="bold") + Text(_cell(get(rows[0]), now))
            console.print(line, soft_wrap=True)
        return
    names = [name for name, _ in columns]
    cells = [[_cell(get(row), now) for _, get in columns] for row in rows]
    shown = len(names) if wide else fit_columns(names, cells, console.width)
    table = Table(title=title, show_lines=False)
    for name in names[:shown]:
        # Nothing folds: an id is what the user copies into the next command.
        table.add_column(name, no_wrap=True)
    for row_cells in cells:
        table.add_row(*(Text(c) for c in row_cells[:shown]))
    if wide:
        # A console as wide as need be: the table keeps its natural width, nothing cut.
        Console(width=10_000).print(table)
    else:
        console.print(table)
    if shown < len(names):
        hidden = ", ".join(names[shown:])
        console.print(Text(f"(not shown at this width: {hidden}; --wide shows them)", style="dim"))
