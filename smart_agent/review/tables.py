"""Rich tables of the review for the terminal; log text always goes in as `Text`, never as
markup (a rationale holding "[red]" must print as written)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from smart_agent.review import fmt
from smart_agent.review.query import ForecastRow, JobRow, Zone, iso
from smart_agent.review.score import Scores


def _t(value: object) -> Text:
    return Text("-" if value is None or value == "" else str(value))


def _plain(title: str) -> Table:
    # One space between columns and no outer frame: the score table's nine columns must fit
    # an 80-column terminal.
    return Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), show_edge=False)


def forecasts(rows: Sequence[ForecastRow], tz: Zone, *, zone: str) -> Table:
    """`list`: one line per forecast, newest first."""
    table = _plain(f"forecasts ({len(rows)}, newest first, {zone})")
    for name in ("id", "made", "predictor", "GPUs", "conf.", "decision/outcome"):
        left = name in ("predictor", "decision/outcome")
        table.add_column(name, no_wrap=True, justify="left" if left else "right")
    table.add_column("cue", overflow="fold", min_width=5)
    table.add_column("reason", overflow="fold", min_width=10)
    for r in rows:
        status = r.decision + (f"/{r.outcome}" if r.outcome and r.outcome != r.decision else "")
        table.add_row(
            str(r.id),
            datetime.fromtimestamp(r.made_at, tz).strftime("%m-%d %H:%M"),
            _t(r.predictor),
            str(r.hold_gpus or r.gpu_count),
            f"{r.confidence:.2f}",
            _t(status),
            _t(r.cue),
            _t((r.reason or "")[:80]),
        )
    return table


def _job(job: JobRow | None, tz: Zone) -> str | None:
    if job is None:
        return None
    return (
        f"#{job.id} {job.job_ref or ''} at {iso(job.at, tz)}, {job.gpus} GPU(s), "
        f"{'warm' if job.warm else 'cold'}, time-to-GPU {fmt.duration(job.time_to_gpu_s)}"
    )


def detail(found: dict[str, Any], tz: Zone) -> list[RenderableType]:
    """`show`: one forecast as name/value lines, then the context its predictors saw."""
    row: ForecastRow = found["forecast"]
    cycle = found["cycle"] or {}
    idle = row.idle_gpu_minutes
    siblings = ", ".join(f"#{s['id']} {s['predictor']} {s['decision']}" for s in found["siblings"])
    fields: list[tuple[str, object]] = [
        ("forecast", f"#{row.id} by {row.predictor}, made {iso(row.made_at, tz)} for {row.user}"),
        ("window", f"{iso(row.start_at, tz)} to {iso(row.end_at, tz)}"),
        ("GPUs", f"{row.gpu_count} x {row.gpu_model or 'any model'}"),
        ("confidence", f"{row.confidence:.2f}"),
        ("expected duration", fmt.duration(row.expected_duration_s)),
        ("rationale", row.rationale),
        ("prompt version", row.prompt_version),
        ("cycle", f"#{cycle['id']} ({cycle['trigger']})" if cycle else None),
        ("cue", row.cue),
        ("decision", row.decision),
        ("reason", row.reason),
        ("hold", f"{row.hold_id} ({row.hold_gpus} GPUs)" if row.hold_id else None),
        ("outcome", f"{row.outcome} at {iso(row.outcome_at, tz)}" if row.outcome else None),
        ("lead", fmt.duration(row.lead_s)),
        ("idle GPU-minutes", None if idle is None else f"{idle:.1f}"),
        ("job", _job(found["job"], tz)),
        ("tokens", f"{row.prompt_tokens} prompt + {row.completion_tokens} completion"),
        ("cost", fmt.usd(row.usd)),
        ("same cycle", siblings),
    ]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    for name, value in fields:
        grid.add_row(name, _t(value))
    out: list[RenderableType] = [grid]
    if cycle.get("context") is not None:
        out.append(Text("\ncontext the predictors saw (redacted):", style="bold"))
        out.append(Text(json.dumps(cycle["context"], indent=2, ensure_ascii=False)))
    return out


def scores(s: Scores) -> list[RenderableType]:
    """`score`: the lines per week, their gap to the baseline, the weekly totals, the method."""
    table = _plain("scores per ISO week")
    versus = _plain(f"compared with the baseline ({s.baseline} in shadow)")
    wide = max((len(fmt.label(ln)) for p in s.periods for ln in p.lines), default=9)
    for t, names in ((table, fmt.HEADERS), (versus, ["predictor", *fmt.VERSUS_HEADERS])):
        t.add_column(names[0], no_wrap=True, min_width=wide)
        for name in names[1:]:
            # The one-word headers stay whole; the two-word ones may wrap.
            t.add_column(name, justify="right", min_width=len(name) if " " not in name else 5)
    for period in s.periods:
        style = "bold" if period.label == "all" else None
        title = Text(period.label if period.label != "all" else "all weeks", style="bold cyan")
        table.add_row(title)
        versus.add_row(title)
        for line in period.lines:
            cells = [Text(c) for c in fmt.cells(line)]
            table.add_row(*cells, style=style)
            if not line.is_baseline:
                versus.add_row(cells[0], *(Text(c) for c in fmt.versus_cells(line)), style=style)
    totals = Table(title="totals per ISO week")
    for name in ("week", "jobs", "warm", "TTG saved", "idle GPU-h", "LLM calls", "tokens", "LLM $"):
        totals.add_column(name)
    for p in s.periods:
        totals.add_row(
            p.label,
            str(p.jobs),
            str(p.warm_jobs),
            fmt.duration(p.ttg_saved_s),
            fmt.hours(p.idle_gpu_hours),
            str(p.llm_calls),
            str(p.llm_tokens),
            fmt.usd(p.llm_usd),
        )
    gap: RenderableType = versus
    if s.baseline is None:
        gap = Text("no statistical predictor ran in shadow: no baseline", style="dim")
    return [table, gap, totals, Text(s.time_to_gpu.method + ".", style="dim")]
