"""Replay results as a plain-text table or one JSON array."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("policy", "policy", "s"),
    ("jobs", "jobs", "d"),
    ("mean_time_to_gpu_s", "mean TTG s", ".1f"),
    ("p50_time_to_gpu_s", "p50 TTG s", ".1f"),
    ("p95_time_to_gpu_s", "p95 TTG s", ".1f"),
    ("gpu_weighted_mean_time_to_gpu_s", "GPU-wtd mean s", ".1f"),
    ("gpu_weighted_p95_time_to_gpu_s", "GPU-wtd p95 s", ".1f"),
    ("warm_hit_rate", "warm hits", ".1%"),
    ("busy_gpu_hours", "busy GPU-h", ",.0f"),
    ("idle_gpu_hours", "idle GPU-h", ",.0f"),
    ("idle_ratio", "idle/busy", ".3f"),
)


def _align(rows: list[list[str]]) -> str:
    """First column left-aligned, the others right-aligned, a rule under the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        pairs = enumerate(zip(row, widths, strict=True))
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in pairs]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_table(results: Sequence[Mapping[str, object]]) -> str:
    """One row per policy with the headline figures."""
    rows = [[title for _, title, _ in _COLUMNS]]
    for r in results:
        rows.append([format(r[key], spec) if key in r else "" for key, _, spec in _COLUMNS])
    return _align(rows)


def format_misses(results: Sequence[Mapping[str, object]]) -> str:
    """Where each policy's misses come from: jobs per category."""
    categories: list[str] = []
    per_policy: list[tuple[str, Mapping[str, int]]] = []
    for r in results:
        misses = r.get("misses")
        counts: Mapping[str, int] = misses if isinstance(misses, Mapping) else {}
        per_policy.append((str(r.get("policy", "")), counts))
        categories.extend(c for c in counts if c not in categories)
    rows = [["policy", *categories]]
    rows.extend([name, *(str(counts.get(c, 0)) for c in categories)] for name, counts in per_policy)
    return _align(rows)


def format_json(results: Sequence[Mapping[str, object]]) -> str:
    """One JSON array, one object per policy."""
    return json.dumps([dict(r) for r in results], indent=2)


def format_results(results: Sequence[Mapping[str, object]], fmt: str = "table") -> str:
    """What `jitgpu replay --format FMT` prints: `json`, or `table` (headline figures, then
    where the misses come from)."""
    if fmt == "json":
        return format_json(results)
    if fmt == "table":
        return f"{format_table(results)}\n\nmisses by cause (jobs)\n{format_misses(results)}"
    raise ValueError(f"unknown format {fmt!r} (expected table or json)")
