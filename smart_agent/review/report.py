"""The HTML report: one self-contained page (inline CSS and SVG, no script, nothing fetched)
with the scores, forecasts against job starts, calibration, idle GPU-hours and LLM cost."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from smart_agent.review import fmt, svg
from smart_agent.review.holds import ACTED, Held
from smart_agent.review.query import Selection, Zone, day_of, days_between, iso
from smart_agent.review.score import Scores, calibration
from smart_agent.review.svg import Bar, Mark, esc

MAX_BARS = 3000  # beyond this the timeline shows the latest windows (an SVG stays light)
LATEST_ROWS = 25
_KIND = {
    "claimed": "hit",
    "hit": "hit",
    "expired": "miss",
    "miss": "miss",
    "cancelled": "cancelled",
    "preempted": "preempted",
    "failed": "failed",
    "pending": "open",
    "open": "open",
}
# No script may run and nothing may be fetched, even if some text escaped the escaping.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;
max-width:1060px;color:#222;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.meta,.note{color:#555;font-size:13px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:16px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:120px}
.card strong{display:block;font-size:20px}
table{border-collapse:collapse;font-size:12.5px;width:100%}
th,td{border-bottom:1px solid #eee;padding:3px 6px;text-align:right;vertical-align:top}
th{background:#f6f6f6}.t,.why{text-align:left}td{white-space:nowrap}tr.base td{background:#f3f8ff}
td.why{white-space:normal;max-width:380px;overflow-wrap:anywhere}
svg.plot{max-width:100%;height:auto;display:block;margin:6px 0}
svg text{font:11px system-ui,sans-serif;fill:#333}svg .lane{font-size:11.5px}
svg .grid{stroke:#e6e6e6}svg .sep{stroke:#f0f0f0}svg .guide{stroke:#2ca02c;stroke-opacity:.18}
svg .diag{stroke:#999;stroke-dasharray:4 4}svg .cal{fill:none;stroke-width:1.5}
svg .pt{fill-opacity:.8;stroke:#fff}
.fw.hit,.bar.hit{fill:#2ca02c}.fw.miss,.bar.miss{fill:#d62728}.fw.cancelled{fill:#ff7f0e}
.fw.preempted{fill:#9467bd}.fw.failed{fill:#8c564b}.fw.open{fill:#aaa}
.fw{fill-opacity:.75}.bar.usd{fill:#1f77b4}
.job{stroke-width:2}.job.warm{stroke:#2ca02c}.job.cold{stroke:#555}
.legend-row span{display:inline-block;margin-right:14px}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:-1px}
"""
_SWATCHES = (
    ("#2ca02c", "claimed / would be claimed"),
    ("#d62728", "expired unclaimed / missed"),
    ("#ff7f0e", "cancelled"),
    ("#9467bd", "preempted"),
    ("#8c564b", "failed"),
    ("#aaa", "still open"),
)


def _table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    kinds: Sequence[str],
    row_classes: Sequence[str] = (),
) -> str:
    """An HTML table; `kinds` gives each column's CSS class ("t" text, "why" wide text)."""
    head = "".join(f'<th class="{k}">{esc(h)}</th>' for h, k in zip(headers, kinds, strict=True))
    body = []
    for i, row in enumerate(rows):
        cls = row_classes[i] if i < len(row_classes) else ""
        tds = "".join(f'<td class="{k}">{esc(v)}</td>' for v, k in zip(row, kinds, strict=True))
        body.append(f'<tr class="{cls}">{tds}</tr>')
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _score_table(scores: Scores, weekly: bool) -> str:
    rows, classes = [], []
    for period in scores.periods[:-1] if weekly else scores.periods[-1:]:
        for line in period.lines:
            cells = fmt.cells(line) + fmt.versus_cells(line)
            rows.append([period.label, *cells] if weekly else cells)
            classes.append("base" if line.is_baseline else "")
    headers = fmt.HEADERS + fmt.VERSUS_HEADERS
    kinds = ["t"] + ["n"] * (len(headers) - 1)
    if weekly:
        headers, kinds = ["week", *headers], ["t", *kinds]
    if not rows:
        return '<p class="note">Nothing to score.</p>'
    return _table(headers, rows, kinds=kinds, row_classes=classes)


def _bar(h: Held, tz: Zone) -> Bar:
    f, row = h.record.forecast, h.row
    end = h.record.claimed_at if h.hit and h.record.claimed_at is not None else f.end_at
    title = (
        f"#{row.id} {h.predictor} ({h.role}): {f.gpu_count} GPU(s) at confidence "
        f"{f.confidence:.2f}, window {iso(f.start_at, tz)} to {iso(f.end_at, tz)}, made "
        f"{iso(row.made_at, tz)}; {h.status}"
    )
    if h.hit:
        title += f" after a lead of {fmt.duration(h.record.lead_s)}"
    if h.repeats:
        title += f"; repeated {h.repeats}x"
    if row.rationale:
        title += f". {row.rationale[:200]}"
    return Bar(f.start_at, end, _KIND.get(h.status, "open"), title)


def _timeline(
    selection: Selection, holds: Sequence[Held], tz: Zone, t0: float, t1: float, plot_id: str
) -> tuple[str, int]:
    inside = [
        h for h in holds if h.record.forecast.end_at >= t0 and h.record.forecast.start_at <= t1
    ]
    inside.sort(key=lambda h: h.record.forecast.start_at)
    dropped = max(0, len(inside) - MAX_BARS)
    lanes: dict[str, list[Bar]] = defaultdict(list)
    for h in sorted(holds, key=lambda h: (h.role != ACTED, h.predictor)):
        lanes.setdefault(f"{'holds' if h.role == ACTED else 'shadow'}: {h.predictor}", [])
    for h in inside[dropped:]:
        lanes[f"{'holds' if h.role == ACTED else 'shadow'}: {h.predictor}"].append(_bar(h, tz))
    marks = [
        Mark(
            j.at,
            "warm" if j.warm else "cold",
            f"job {j.job_ref or j.id} at {iso(j.at, tz)}: {j.gpus if j.gpus is not None else '?'} "
            f"GPU(s), {'warm' if j.warm else 'cold'}, time-to-GPU {fmt.duration(j.time_to_gpu_s)}",
        )
        for j in selection.jobs
        if t0 <= j.at <= t1
    ]
    label = "forecast windows against job starts"
    plot = svg.timeline(
        list(lanes.items()), marks, t0=t0, t1=t1, tz=tz, plot_id=plot_id, label=label
    )
    return plot, dropped


def _calibration(holds: Sequence[Held]) -> str:
    series = []
    for (role, predictor), bins in sorted(calibration(holds).items(), key=lambda kv: kv[0]):
        name = f"{predictor} ({'holds' if role == ACTED else 'shadow'})"
        pts = [
            (
                b.mean_confidence,
                b.hit_rate,
                b.holds,
                f"{name}: confidence {b.low:.1f} to {b.high:.1f}, {b.holds} hold(s), "
                f"{b.hits} claimed ({b.hit_rate:.0%})",
            )
            for b in bins
        ]
        series.append((name, pts))
    return svg.calibration(series, plot_id="calibration", label="calibration")


def _daily(
    selection: Selection, holds: Sequence[Held], tz: Zone, days: list[str]
) -> tuple[str, str]:
    index = {d: i for i, d in enumerate(days)}
    waiting, wasted, spend = [0.0] * len(days), [0.0] * len(days), [0.0] * len(days)
    for h in holds:
        if h.role != ACTED or not h.resolved:
            continue
        i = index.get(day_of(h.row.outcome_at or h.row.made_at, tz))
        if i is not None:
            (waiting if h.hit else wasted)[i] += h.idle_gpu_s / 3600.0
    source = "LLM calls"
    for c in selection.llm_calls:
        i = index.get(day_of(c.at, tz))
        if i is not None:
            spend[i] += c.usd or 0.0
    if not selection.llm_calls:
        # Without call records, every call's cost still rides on its first shadow forecast.
        source = "shadow forecasts"
        for r in selection.forecasts:
            i = index.get(day_of(r.made_at, tz))
            if r.shadow and i is not None:
                spend[i] += r.usd or 0.0
    idle = svg.bars(
        days,
        [("warm, waiting for its job", "hit", waiting), ("never claimed", "miss", wasted)],
        unit="GPU-hours",
        plot_id="idle",
        label="idle GPU-hours per day",
    )
    cost = svg.bars(
        days,
        [(f"USD ({source})", "usd", spend)],
        unit="USD",
        plot_id="cost",
        label="LLM cost per day",
        decimals=4,
    )
    return idle, cost


def _latest(selection: Selection, tz: Zone) -> str:
    acted = [r for r in selection.forecasts if not r.shadow][-LATEST_ROWS:][::-1]
    rows = [
        [
            str(r.id),
            datetime.fromtimestamp(r.made_at, tz).strftime("%Y-%m-%d %H:%M"),
            r.predictor,
            f"{r.gpu_count}",
            f"{r.confidence:.2f}",
            (r.cue or "-")[:40],
            r.outcome or "-",
            r.decision,
            " | ".join(x for x in (r.reason, r.rationale) if x),
        ]
        for r in acted
    ]
    headers = ["id", "made", "predictor", "GPUs", "conf.", "cue", "outcome", "decision", "why"]
    if not rows:
        return '<p class="note">No acted forecasts in this selection.</p>'
    kinds = ["n", "t", "t", "n", "n", "t", "t", "t", "why"]
    return _table(headers, rows, kinds=kinds)


def build(
    selection: Selection,
    scores: Scores,
    *,
    tz: Zone,
    source: str,
    filters: str,
    generated_at: float,
) -> str:
    """The report as one HTML string; every text from the log is escaped."""
    points = [h.record.forecast.start_at for h in scores.holds]
    points += [h.record.forecast.end_at for h in scores.holds]
    points += [j.at for j in selection.jobs] + [c.at for c in selection.llm_calls]
    t0, t1 = (min(points), max(points)) if points else (generated_at - 86400, generated_at)
    total = scores.total
    plot, dropped = _timeline(selection, scores.holds, tz, t0, t1, "timeline")
    zoom = ""
    if t1 - t0 > 3 * 86400:
        day_plot, _ = _timeline(selection, scores.holds, tz, t1 - 86400, t1, "timeline-day")
        zoom = f"<h3>The last 24 hours</h3>{day_plot}"
    idle, cost = _daily(selection, scores.holds, tz, days_between(t0, t1, tz))
    acted = [ln for ln in total.lines if ln.role == ACTED]
    held = sum(ln.score.forecasts for ln in acted)
    claimed = sum(ln.score.claimed for ln in acted)
    cards = [
        ("jobs", f"{total.jobs}"),
        (
            "started warm",
            f"{total.warm_jobs} ({fmt.share(total.warm_jobs / max(total.jobs, 1))})",
        ),
        ("holds claimed", f"{claimed} of {held}"),
        ("time-to-GPU saved", fmt.duration(total.ttg_saved_s)),
        ("idle GPU-hours", fmt.hours(total.idle_gpu_hours)),
        ("LLM spend", f"{fmt.usd(total.llm_usd)} ({total.llm_calls} calls)"),
    ]
    card_html = "".join(
        f'<div class="card">{esc(k)}<strong>{esc(v)}</strong></div>' for k, v in cards
    )
    swatches = "".join(
        f'<span><i class="sw" style="background:{c}"></i>{esc(t)}</span>' for c, t in _SWATCHES
    )
    note = (
        f" Showing the latest {MAX_BARS} windows; {dropped} older ones left out." if dropped else ""
    )
    base = scores.baseline or "none (no statistical predictor ran in shadow)"
    generated = iso(generated_at, tz)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>jitgpu prediction report</title><style>{CSS}</style></head>
<body>
<h1>jitgpu prediction report</h1>
<p class="meta">Log {esc(source)} &middot; {esc(iso(t0, tz))} to {esc(iso(t1, tz))} &middot;
filters: {esc(filters or "none")} &middot; generated {esc(generated)}</p>
<div class="cards">{card_html}</div>
<h2>Scores</h2>
<p class="note">Baseline: {esc(base)} (marked *). <em>holds</em> rows are the holds the agent
really made, with the outcomes the log records; <em>shadow</em> rows are the holds each member's
own forecasts would have made under the policy's rule (a window an open hold covers is not
held again), matched against the same jobs. {esc(scores.time_to_gpu.method)}.</p>
{_score_table(scores, weekly=False)}
<h3>Per ISO week</h3>
{_score_table(scores, weekly=True)}
<h2>Forecasts against job starts</h2>
<p class="legend-row note">{swatches}<span>| job start: green warm, grey cold</span></p>
<p class="note">Each bar is a hold's window (ending at its claim when claimed); hover for the
forecast.{esc(note)}</p>
{plot}
{zoom}
<h2>Calibration</h2>
<p class="note">Resolved holds binned by stated confidence against the share a job claimed;
points on the dashed diagonal are well calibrated, larger points hold more holds.</p>
{_calibration(scores.holds)}
<h2>Idle GPU-hours per day</h2>
<p class="note">GPU-hours the agent's holds sat placed and unused, by the day they ended.</p>
{idle}
<h2>LLM cost per day</h2>
{cost}
<h2>Latest decisions</h2>
{_latest(selection, tz)}
</body></html>
"""
