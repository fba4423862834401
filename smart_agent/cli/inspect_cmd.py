"""`jitgpu agent inspect FILE...`: what the agent would read from each file, without a server."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from smart_agent.cli.common import console, err_console

# Rows of the baseline table shown; --format json gives them all.
MAX_BASELINE_ROWS = 40
KINDS = ("auto", "plain", "jsonl", "sacct", "squeue", "shell_history", "jobs_csv")


def inspect_files(
    files: list[Path] = typer.Argument(..., help="Files to read, as the agent would."),
    kind: str = typer.Option("auto", "--kind", help=f"Parser: {', '.join(KINDS)}."),
    output: str = typer.Option("table", "--format", help="table or json."),
    sacct_fields: str | None = typer.Option(
        None, "--sacct-fields", help="Columns of header-less sacct rows, e.g. JobID,State,End."
    ),
    user: str | None = typer.Option(
        None, "--user", help="Whose jobs are 'own' \\[default: login name]."
    ),
    text: bool = typer.Option(False, "--text", help="Also the redacted text an LLM would see."),
) -> None:
    """Recognised kind, job events (id, user, GPUs, model, time, source line), cues, notes,
    and with --text the redacted lines: check a set-up before running the agent."""
    from smart_agent.inspection import inspect_file
    from smart_agent.sources import login_name

    if kind not in KINDS:
        err_console.print(f"error: --kind {kind!r}; allowed: {', '.join(KINDS)}")
        raise typer.Exit(2)
    if output not in ("table", "json"):
        err_console.print(f"error: --format {output!r}; allowed: table, json")
        raise typer.Exit(2)
    fields = [f.strip() for f in sacct_fields.split(",") if f.strip()] if sacct_fields else None
    results = []
    # Notes are part of the output; the parsers' log warnings would repeat them.
    quiet = logging.getLogger("smart_agent.parsers")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        for path in files:
            if not path.is_file():
                err_console.print(f"error: {path}: not a readable file")
                raise typer.Exit(2)
            results.append(
                inspect_file(path, user=user or login_name(), kind=kind, sacct_fields=fields)
            )
    finally:
        quiet.setLevel(level)
    if output == "json":
        typer.echo(json.dumps([r.as_dict() if text else _no_text(r.as_dict()) for r in results]))
        return
    for result in results:
        data = result.as_dict()
        layout = f" ({data['layout']})" if data["layout"] else ""
        state = "recognized" if data["recognized"] else "NOT recognized"
        console.print(
            f"[bold]{data['path']}[/bold]: {data['kind']}{layout}, {state}; "
            f"{data['lines']} lines, {data['unknown_lines']} not understood, "
            f"{len(data['events'])} events",
            highlight=False,
        )
        for note in data["notes"]:
            console.print(f"  [yellow]note:[/yellow] {note}", highlight=False)
        _print_baseline(data["jobs"])
        if data["events"]:
            table = Table("line", "event", "job", "user", "gpus", "model", "at (UTC)", "excerpt")
            for e in data["events"]:
                table.add_row(
                    str(e["line"]),
                    e["cue"]
                    if e["kind"] == "cue"
                    else e["kind"] + (f" ({e['cue']})" if e["cue"] else ""),
                    e["job_id"] or "",
                    e["user"],
                    "" if e["gpus"] is None else str(e["gpus"]),
                    e["gpu_model"] or "",
                    e["at"][:19],
                    (e["excerpt"] or "")[:60],
                )
            console.print(table)
        if text:
            for line in data["redacted"]:
                console.print(f"  | {line}", highlight=False, markup=False)


def _no_text(data: dict) -> dict:
    return {k: v for k, v in data.items() if k != "redacted"}


def _print_baseline(jobs: list[dict[str, Any]]) -> None:
    """The jobs a saved sacct or squeue table held when it was read: the state the agent
    starts from (a snapshot read on its own gives no events; its jobs are not arrivals)."""
    first = [job for job in jobs if job.get("baseline")]
    if not first:
        return
    later = len(jobs) - len(first)
    console.print(
        f"  [bold]baseline[/bold]: {len(first)} jobs already there: their state, not arrivals",
        highlight=False,
    )
    if later:
        console.print(f"  {later} more jobs first seen in later snapshots: see the events")
    table = Table("job", "state", "user", "gpus", "model", "submitted (UTC)")
    for job in first[:MAX_BASELINE_ROWS]:
        state = str(job.get("state") or "")
        if job.get("pending_array"):
            state += " (array)"
        if job.get("gone"):
            state += ", gone"
        submit = job.get("submit")
        table.add_row(
            str(job["job_id"]),
            state,
            job.get("user") or "",
            "?" if job.get("gpus") is None else str(job["gpus"]),
            job.get("gpu_model") or "",
            submit[5:16].replace("T", " ") if isinstance(submit, str) else "",
        )
    console.print(table)
    if len(first) > MAX_BASELINE_ROWS:
        console.print(f"  ... {len(first) - MAX_BASELINE_ROWS} more (--format json lists all)")
