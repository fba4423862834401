"""Hand-drawn inline SVG plots for the HTML report: no script, no external resource.

Every text that may come from the log goes through `esc`; numbers are formatted here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape

from smart_agent.review.query import Zone

WIDTH = 1000
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def _n(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


class Canvas:
    """An SVG element built from parts; `data-*` attributes say what it drew (for tests)."""

    def __init__(self, width: float, height: float, *, plot_id: str, label: str) -> None:
        self.width = width
        self.height = height
        self.plot_id = plot_id
        self.label = label
        self.parts: list[str] = []
        self.data: dict[str, int] = {}

    def el(
        self, tag: str, text: str | None = None, title: str | None = None, **attrs: object
    ) -> None:
        attr = "".join(
            f' {k.rstrip("_").replace("_", "-")}="{esc(_n(v) if isinstance(v, float) else v)}"'
            for k, v in attrs.items()
        )
        inner = (f"<title>{esc(title)}</title>" if title else "") + (esc(text) if text else "")
        self.parts.append(f"<{tag}{attr}>{inner}</{tag}>" if inner else f"<{tag}{attr}/>")

    def text(self, x: float, y: float, text: str, **attrs: object) -> None:
        self.el("text", text, x=x, y=y, **attrs)

    def render(self) -> str:
        data = "".join(f' data-{k}="{v}"' for k, v in self.data.items())
        return (
            f'<svg class="plot" id="{esc(self.plot_id)}" '
            f'width="{_n(self.width)}" height="{_n(self.height)}" '
            f'viewBox="0 0 {_n(self.width)} {_n(self.height)}" role="img" '
            f'aria-label="{esc(self.label)}"{data}>' + "".join(self.parts) + "</svg>"
        )


def nice_step(span: float, ticks: int = 5) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) giving about `ticks` ticks."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def _y_axis(c: Canvas, top: float, bottom: float, left: float, right: float, vmax: float) -> float:
    """Grid lines and labels from 0 to a round maximum; returns that maximum."""
    step = nice_step(vmax or 1.0)
    top_value = step * max(1, math.ceil((vmax or 1.0) / step - 1e-9))
    v = 0.0
    while v <= top_value + step / 2:
        y = bottom - (bottom - top) * v / top_value
        c.el("line", x1=left, x2=right, y1=y, y2=y, class_="grid")
        c.text(left - 6, y + 4, f"{v:g}", class_="tick", text_anchor="end")
        v += step
    return top_value


@dataclass(frozen=True, slots=True)
class Bar:
    """A window on the timeline: [start, end], drawn with a CSS class, described on hover."""

    start: float
    end: float
    kind: str
    title: str


@dataclass(frozen=True, slots=True)
class Mark:
    """A job start on the timeline."""

    at: float
    kind: str
    title: str


_TIME_STEPS = (900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400)


def _time_ticks(t0: float, t1: float, tz: Zone) -> list[tuple[float, str]]:
    """Round local times (whole hours, midnights) about ten apart, with their labels."""
    step = next((s for s in _TIME_STEPS if (t1 - t0) / s <= 10), _TIME_STEPS[-1])
    at = datetime.fromtimestamp(t0, tz).replace(minute=0, second=0, microsecond=0)
    if step >= 86400:
        at = at.replace(hour=0)
    elif step > 3600:
        at = at.replace(hour=at.hour - at.hour % (step // 3600))
    out = []
    while at.timestamp() <= t1:
        if at.timestamp() >= t0:
            fmt = "%b %d" if step >= 86400 else ("%b %d %H:%M" if at.hour == 0 else "%H:%M")
            out.append((at.timestamp(), at.strftime(fmt)))
        # Days step on the wall clock (a DST day is not 24 h); shorter steps on real time.
        at = (
            at + timedelta(days=step // 86400)
            if step >= 86400
            else datetime.fromtimestamp(at.timestamp() + step, tz)
        )
    return out


def timeline(
    lanes: Sequence[tuple[str, Sequence[Bar]]],
    marks: Sequence[Mark],
    *,
    t0: float,
    t1: float,
    tz: Zone,
    plot_id: str,
    label: str,
) -> str:
    """Forecast windows per lane against job starts (a top lane and guides through all)."""
    left, right, top, lane_h = 170.0, WIDTH - 15.0, 24.0, 20.0
    height = top + lane_h * (len(lanes) + 1) + 34
    c = Canvas(WIDTH, height, plot_id=plot_id, label=label)
    span = max(t1 - t0, 1.0)

    def x(t: float) -> float:
        return left + (right - left) * (min(max(t, t0), t1) - t0) / span

    bottom = top + lane_h * (len(lanes) + 1)
    for at, text in _time_ticks(t0, t1, tz):
        c.el("line", x1=x(at), x2=x(at), y1=top, y2=bottom, class_="grid")
        c.text(x(at), bottom + 16, text, class_="tick", text_anchor="middle")
    c.text(left - 8, top + lane_h * 0.7, "job starts", class_="lane", text_anchor="end")
    for m in marks:
        c.el("line", x1=x(m.at), x2=x(m.at), y1=top + lane_h, y2=bottom, class_="guide")
        c.el(
            "line",
            title=m.title,
            x1=x(m.at),
            x2=x(m.at),
            y1=top + 3,
            y2=top + lane_h - 3,
            class_=f"job {m.kind}",
        )
    bars = 0
    for i, (name, lane) in enumerate(lanes, start=1):
        y = top + lane_h * i
        c.el("line", x1=left, x2=right, y1=y, y2=y, class_="sep")
        c.text(left - 8, y + lane_h * 0.7, name, class_="lane", text_anchor="end")
        for b in lane:
            if b.end < t0 or b.start > t1:
                continue
            x0 = x(b.start)
            c.el(
                "rect",
                title=b.title,
                x=x0,
                y=y + 4,
                width=max(2.0, x(b.end) - x0),
                height=lane_h - 8,
                class_=f"fw {b.kind}",
            )
            bars += 1
    c.data = {"bars": bars, "jobs": len(marks), "lanes": len(lanes)}
    return c.render()


def calibration(
    series: Sequence[tuple[str, Sequence[tuple[float, float, int, str]]]],
    *,
    plot_id: str,
    label: str,
) -> str:
    """Observed hit rate against stated confidence: points (mean confidence, hit rate, n,
    tooltip) per series, sized by count, over the diagonal of perfect calibration."""
    size, left, top = 400.0, 50.0, 15.0
    width = left + size + 260
    c = Canvas(width, top + size + 45, plot_id=plot_id, label=label)
    bottom, right = top + size, left + size

    def px(v: float) -> float:
        return left + size * v

    def py(v: float) -> float:
        return bottom - size * v

    for k in range(6):
        v = k / 5
        c.el("line", x1=px(v), x2=px(v), y1=top, y2=bottom, class_="grid")
        c.el("line", x1=left, x2=right, y1=py(v), y2=py(v), class_="grid")
        c.text(px(v), bottom + 16, f"{v:.1f}", class_="tick", text_anchor="middle")
        c.text(left - 6, py(v) + 4, f"{v:.1f}", class_="tick", text_anchor="end")
    c.el("line", x1=px(0), y1=py(0), x2=px(1), y2=py(1), class_="diag")
    c.text(px(0.5), bottom + 36, "stated confidence", class_="axis", text_anchor="middle")
    c.text(
        12,
        py(0.5),
        "hit rate",
        class_="axis",
        text_anchor="middle",
        transform=f"rotate(-90 12 {_n(py(0.5))})",
    )
    points = 0
    for i, (name, pts) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        if len(pts) > 1:
            path = " ".join(f"{_n(px(cx))},{_n(py(hy))}" for cx, hy, _, _ in pts)
            c.el("polyline", points=path, class_="cal", stroke=color)
        for cx, hy, n, tip in pts:
            r = min(11.0, 3.0 + 1.5 * math.sqrt(n))
            c.el("circle", title=tip, cx=px(cx), cy=py(hy), r=r, fill=color, class_="pt")
            points += 1
        ly = top + 14 + 20 * i
        c.el("circle", cx=right + 24, cy=ly - 4, r=5.0, fill=color)
        c.text(right + 36, ly, name, class_="legend")
    c.data = {"points": points, "series": len(series)}
    return c.render()


def bars(
    days: Sequence[str],
    series: Sequence[tuple[str, str, Sequence[float]]],
    *,
    unit: str,
    plot_id: str,
    label: str,
    decimals: int = 2,
) -> str:
    """Stacked bars per day: series of (name, CSS class, one value per day)."""
    left, right, top, bottom = 60.0, WIDTH - 200.0, 15.0, 215.0
    c = Canvas(WIDTH, bottom + 40, plot_id=plot_id, label=label)
    totals = [sum(s[2][i] for s in series) for i in range(len(days))]
    vmax = _y_axis(c, top, bottom, left, right, max(totals, default=0.0))
    c.text(
        14,
        (top + bottom) / 2,
        unit,
        class_="axis",
        text_anchor="middle",
        transform=f"rotate(-90 14 {_n((top + bottom) / 2)})",
    )
    slot = (right - left) / max(1, len(days))
    every = max(1, math.ceil(len(days) / 14))
    drawn = 0
    for i, day in enumerate(days):
        x0 = left + slot * i + slot * 0.15
        base = bottom
        for name, kind, values in series:
            v = values[i]
            if v <= 0:
                continue
            h = (bottom - top) * v / vmax
            c.el(
                "rect",
                title=f"{day}: {name} {v:.{decimals}f} {unit}",
                x=x0,
                y=base - h,
                width=slot * 0.7,
                height=h,
                class_=f"bar {kind}",
            )
            base -= h
            drawn += 1
        if i % every == 0:
            c.text(x0 + slot * 0.35, bottom + 16, day[5:], class_="tick", text_anchor="middle")
    for k, (name, kind, _) in enumerate(series):
        ly = top + 14 + 20 * k
        c.el("rect", x=right + 20, y=ly - 10, width=12.0, height=12.0, class_=f"bar key {kind}")
        c.text(right + 38, ly, name, class_="legend")
    c.data = {"bars": drawn, "days": len(days)}
    return c.render()
