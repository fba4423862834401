"""`jitgpu alloc ...` and `jitgpu hold ...`: manual allocation, holds and claims over REST."""

from __future__ import annotations

import typer

from smart_agent.cli import waiting
from smart_agent.cli.common import JsonOpt, ServerOpt, TokenOpt, WideOpt, client, emit

alloc_app = typer.Typer(help="Allocate and release GPUs (reactive).", no_args_is_help=True)
hold_app = typer.Typer(help="Hold GPUs ahead of a job, and claim them.", no_args_is_help=True)

# In order of importance: a table leaves out, from the right, what does not fit (--wide).
ALLOC_COLUMNS = (
    ("id", lambda a: a.id),
    ("status", lambda a: a.status.value),
    ("gpus", lambda a: a.gpu_count),
    ("model", lambda a: a.gpu_model),
    ("warm", lambda a: "yes" if a.warm else "no"),
    ("time-to-GPU", lambda a: a.time_to_gpu_s),
    ("on", lambda a: sorted({g.node for g in a.gpus})),
    ("requested", lambda a: a.requested_at),
    ("hold", lambda a: a.hold_id),
)
ALLOC_DETAILS = (
    ("lease s", lambda a: a.lease_s),
    ("expires", lambda a: a.expires_at),
    ("gpu uuids", lambda a: [g.uuid for g in a.gpus]),
    ("time-to-GPU is", lambda a: a.time_to_gpu_note),
    ("reason", lambda a: a.reason),
)
HOLD_COLUMNS = (
    ("id", lambda h: h.id),
    ("status", lambda h: h.status.value),
    ("gpus", lambda h: h.gpu_count),
    ("start", lambda h: h.start_at),
    ("expires", lambda h: h.expires_at),
    ("warm-up s", lambda h: h.warmup_s),
    ("model", lambda h: h.gpu_model),
    ("confidence", lambda h: h.confidence),
    ("source", lambda h: h.source.value),
)
HOLD_DETAILS = (
    ("lead s", lambda h: h.lead_s),
    ("warm-up", lambda h: h.warmup),
    ("on", lambda h: sorted({g.node for g in h.gpus})),
    ("allocation", lambda h: h.allocation_id),
    ("reason", lambda h: h.reason),
)


@alloc_app.command("create")
def alloc_create(
    gpus: int = typer.Argument(..., min=1, help="How many GPUs."),
    model: str | None = typer.Option(None, "--model", help="GPU model, e.g. H100."),
    lease_s: int | None = typer.Option(None, "--lease", help="Lease in seconds."),
    hold_id: str | None = typer.Option(None, "--hold", help="Claim this hold."),
    no_holds: bool = typer.Option(False, "--no-holds", help="Do not claim a matching hold."),
    wait: bool = typer.Option(False, "--wait", help="Wait while the request is queued."),
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Allocate GPUs now (claims a matching warm hold of yours unless --no-holds)."""
    with client(server, token) as c:
        alloc = c.allocate(
            gpus, gpu_model=model, lease_s=lease_s, hold_id=hold_id, use_holds=not no_holds
        )
        if wait:
            alloc = waiting.wait_for(
                alloc,
                c.get_allocation,
                lambda a: a.status.value != "pending",
                waiting.alloc_line,
                kind="alloc",
            )
    emit(alloc, as_json=as_json, columns=ALLOC_COLUMNS, details=ALLOC_DETAILS)


@alloc_app.command("list")
def alloc_list(
    status: list[str] | None = typer.Option(None, "--status"),
    limit: int = typer.Option(50, min=1, max=1000),
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
    as_json: bool = JsonOpt,
    wide: bool = WideOpt,
) -> None:
    """List your allocations, newest first."""
    with client(server, token) as c:
        emit(
            c.list_allocations(status=status, limit=limit),
            as_json=as_json,
            columns=ALLOC_COLUMNS,
            title="allocations",
            wide=wide,
        )


@alloc_app.command("show")
def alloc_show(
    allocation_id: str,
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Show one allocation: its GPUs, its time-to-GPU, and why it waits if it does."""
    with client(server, token) as c:
        emit(
            c.get_allocation(allocation_id),
            as_json=as_json,
            columns=ALLOC_COLUMNS,
            details=ALLOC_DETAILS,
        )


@alloc_app.command("release")
def alloc_release(
    allocation_id: str,
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Release an allocation (safe to repeat)."""
    with client(server, token) as c:
        emit(
            c.release(allocation_id), as_json=as_json, columns=ALLOC_COLUMNS, details=ALLOC_DETAILS
        )


@hold_app.command("create")
def hold_create(
    gpus: int = typer.Argument(..., min=1, help="How many GPUs."),
    ttl_s: int = typer.Option(900, "--ttl", help="Claimable until start + ttl (seconds)."),
    start_in_s: float = typer.Option(0.0, "--in", help="Job expected in this many seconds."),
    lead_s: int | None = typer.Option(None, "--lead", help="Place and warm this long before."),
    confidence: float = typer.Option(1.0, min=0.0, max=1.0),
    model: str | None = typer.Option(None, "--model"),
    warmup: str | None = typer.Option(None, "--warmup", help="Warm-up profile name."),
    wait: bool = typer.Option(
        False, "--wait", help="Wait until the hold is ready, with a live status line."
    ),
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Hold GPUs for a job expected soon; they are warmed before it starts."""
    with client(server, token) as c:
        hold = c.hold(
            gpus,
            ttl_s=ttl_s,
            start_in_s=start_in_s,
            lead_s=lead_s,
            confidence=confidence,
            gpu_model=model,
            warmup=warmup,
        )
        if wait:
            hold = waiting.wait_for(
                hold,
                c.get_hold,
                lambda h: h.status.value in waiting.HOLD_DONE,
                waiting.hold_line,
                kind="hold",
            )
    emit(hold, as_json=as_json, columns=HOLD_COLUMNS, details=HOLD_DETAILS)


@hold_app.command("list")
def hold_list(
    status: list[str] | None = typer.Option(None, "--status"),
    limit: int = typer.Option(50, min=1, max=1000),
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
    as_json: bool = JsonOpt,
    wide: bool = WideOpt,
) -> None:
    """List your holds, newest first."""
    with client(server, token) as c:
        emit(
            c.list_holds(status=status, limit=limit),
            as_json=as_json,
            columns=HOLD_COLUMNS,
            title="holds",
            wide=wide,
        )


@hold_app.command("show")
def hold_show(
    hold_id: str,
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Show one hold."""
    with client(server, token) as c:
        emit(c.get_hold(hold_id), as_json=as_json, columns=HOLD_COLUMNS, details=HOLD_DETAILS)


@hold_app.command("claim")
def hold_claim(
    hold_id: str,
    gpus: int | None = typer.Option(
        None, "--gpus", min=1, help="Take only this many of the hold's GPUs; the rest are freed."
    ),
    lease_s: int | None = typer.Option(None, "--lease"),
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Turn a hold into an allocation (instant when the hold is ready)."""
    with client(server, token) as c:
        alloc = c.claim(hold_id, gpu_count=gpus, lease_s=lease_s)
        emit(alloc, as_json=as_json, columns=ALLOC_COLUMNS, details=ALLOC_DETAILS)


@hold_app.command("cancel")
def hold_cancel(
    hold_id: str,
    server: str | None = ServerOpt,
    token: str | None = TokenOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Cancel a hold (safe to repeat)."""
    with client(server, token) as c:
        emit(c.cancel_hold(hold_id), as_json=as_json, columns=HOLD_COLUMNS, details=HOLD_DETAILS)
