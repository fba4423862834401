"""Number and time formats shared by the command line and the HTML report."""

from __future__ import annotations

from smart_agent.review.score import Line


def duration(seconds: float | None) -> str:
    """45s, 4m10s, 2h05m, 3d04h: short, and exact enough to compare lead times."""
    if seconds is None:
        return "-"
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if s < 60:
        return f"{sign}{s:.0f}s"
    if s < 3600:
        return f"{sign}{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{sign}{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{sign}{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def usd(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:.4f}" if 0 < abs(value) < 0.01 else f"${value:.2f}"


def hours(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _delta(value: float | None, unit: str, scale: float = 1.0, digits: int = 0) -> str:
    return "-" if value is None else f"{value * scale:+.{digits}f}{unit}"


def _signed_duration(value: float | None) -> str:
    if value is None:
        return "-"
    return ("+" if value >= 0 else "") + duration(value)


def versus_cells(line: Line) -> list[str]:
    """The gap to the baseline's shadow figures: precision and recall in points, idle
    GPU-hours, time-to-GPU saved, LLM dollars."""
    if line.is_baseline:
        return ["baseline", "", "", "", ""]
    v = line.vs_baseline
    if v is None:
        return ["-"] * 5
    return [
        _delta(v["precision"], " pts", 100),
        _delta(v["recall"], " pts", 100),
        _delta(v["idle_gpu_hours"], "", digits=2),
        _signed_duration(v["time_to_gpu_saved_s"]),
        _delta(v["llm_usd"], "", digits=4),
    ]


VERSUS_HEADERS = ["Δ precision", "Δ recall", "Δ idle GPU-h", "Δ TTG saved", "Δ LLM $"]


def label(line: Line) -> str:
    """ "holds: ensemble" for the agent's real holds, "shadow: burst *" for a member (the
    star marks the baseline)."""
    role = "holds" if line.role == "acted" else "shadow"
    return f"{role}: {line.predictor}" + (" *" if line.is_baseline else "")


def cells(line: Line) -> list[str]:
    """The score table's columns for one line (the CLI and the report show the same)."""
    d = line.as_dict()
    return [
        label(line),
        f"{d['claimed']}/{d['holds']}",
        share(d["precision"]),
        f"{d['covered']}/{d['jobs']}",
        share(d["recall"]),
        duration(d["mean_lead_s"]),
        hours(d["idle_gpu_hours"]),
        duration(d["time_to_gpu_saved_s"]),
        usd(d["llm_usd"]),
    ]


# claimed: holds claimed / holds resolved; covered: jobs covered / jobs that wanted GPUs.
HEADERS = [
    "predictor",
    "claimed",
    "prec.",
    "covered",
    "recall",
    "lead",
    "idle GPU-h",
    "TTG saved",
    "LLM $",
]
