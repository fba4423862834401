"""Versioned prompt files: finding and loading them, and rendering a context as fenced data."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from string import Template
from typing import Any

from predictors.context import Context
from predictors.llm_config import LlmConfig
from predictors.llm_schema import answer_schema

FENCE_OPEN = "<untrusted_data>"
FENCE_CLOSE = "</untrusted_data>"
PARTS = ("system", "user", "retry")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


class PromptError(ValueError):
    """A prompt version that is missing or does not match the answer model."""


def candidate_dirs(override: str | Path | None = None) -> list[Path]:
    """Where prompts may live: an explicit folder, the installed package, the source tree."""
    here = Path(__file__).resolve().parent
    dirs = [Path(override)] if override is not None else []
    # The wheel maps <repo>/prompts to predictors/prompts; a source checkout has it beside.
    return [*dirs, here / "prompts", here.parent / "prompts"]


def find_prompts_dir(override: str | Path | None = None) -> Path:
    tried = candidate_dirs(override)
    for folder in tried:
        if folder.is_dir():
            return folder
        if override is not None:
            break  # an explicit folder that is missing is an error, not a hint
    raise PromptError("no prompts folder found; tried " + ", ".join(str(p) for p in tried))


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """One prompt version: the three message templates and the answer's JSON Schema."""

    id: str
    system: Template
    user: Template
    retry: Template
    schema: dict[str, Any]

    def system_text(self, config: LlmConfig) -> str:
        return self.system.substitute(
            schema=json.dumps(self.schema, separators=(",", ":")),
            horizon_s=f"{config.max_horizon_s:.0f}",
            max_window_s=f"{config.max_window_s:.0f}",
            max_gpus=str(config.max_gpus),
            max_forecasts=str(config.max_forecasts),
        )

    def user_text(self, fenced_data: str) -> str:
        return self.user.substitute(data=fenced_data)

    def retry_text(self, error: str) -> str:
        return self.retry.substitute(error=sanitize_text(error, 1500))


def load_prompt(prompt_id: str, prompts_dir: str | Path | None = None) -> PromptTemplate:
    """Load `<name>/v<N>` and check it against the answer model the code validates with."""
    return _load(prompt_id, str(find_prompts_dir(prompts_dir)))


@lru_cache(maxsize=16)
def _load(prompt_id: str, root: str) -> PromptTemplate:
    name, _, version = prompt_id.partition("/")
    if not name or not version:
        raise PromptError(f"prompt id must look like name/v1, not {prompt_id!r}")
    folder = Path(root) / name
    texts: dict[str, Template] = {}
    for part in PARTS:
        path = folder / f"{version}.{part}.md"
        if not path.is_file():
            raise PromptError(f"prompt {prompt_id}: missing {path.name} in {folder}")
        texts[part] = Template(path.read_text(encoding="utf-8"))
    schema_path = folder / f"{version}.schema.json"
    if not schema_path.is_file():
        raise PromptError(f"prompt {prompt_id}: missing {schema_path.name} in {folder}")
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    if schema != answer_schema():
        raise PromptError(
            f"prompt {prompt_id}: {schema_path.name} differs from the answer model; "
            "publish a new prompt version with the new schema"
        )
    template = PromptTemplate(prompt_id, texts["system"], texts["user"], texts["retry"], schema)
    # Fail at load, not at the first call, on a placeholder the code does not fill.
    template.system_text(LlmConfig(model="check"))
    template.user_text("")
    template.retry_text("")
    return template


def sanitize_text(text: str, limit: int) -> str:
    """Printable, single-line, bounded: control and format characters (bidi tricks) removed."""
    cleaned = "".join(
        " " if ch in "\t\r\n" else ch
        for ch in text
        if ch in "\t\r\n" or unicodedata.category(ch) not in ("Cc", "Cf", "Co", "Cs")
    )
    cleaned = " ".join(cleaned.split())
    return cleaned if len(cleaned) <= limit else cleaned[: max(0, limit - 3)] + "..."


def fence(data: dict[str, Any]) -> str:
    """JSON between the markers; no byte of the data can close the fence or look like one."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f"{FENCE_OPEN}\n{text}\n{FENCE_CLOSE}"


def _quantiles(window: Any, qs: tuple[float, ...]) -> dict[str, float] | None:
    if not len(window):
        return None
    return {f"p{round(q * 100)}": round(window.quantile(q), 1) for q in qs}


def _ago(now: float, at: float | None) -> float | None:
    return None if at is None else round(now - at, 1)


def context_data(context: Context, now: float, config: LlmConfig) -> dict[str, Any]:
    """The compact, JSON-able view of a context that the model sees (no raw log lines)."""
    history = context.history
    offset = history.config.utc_offset_s
    local = datetime.fromtimestamp(now + offset, tz=UTC)
    sizes = sorted(history.size_counts.items(), key=lambda item: (-item[1], -item[0]))[:3]
    busiest = sorted(range(24), key=lambda h: (-history.hod_jobs[h], h))[:3]
    events = []
    for event in context.events[-config.max_events :]:
        item: dict[str, Any] = {"seconds_ago": round(now - event.at, 1), "kind": str(event.kind)}
        if event.gpus is not None:
            item["gpus"] = event.gpus
        if event.gpu_model:
            item["gpu_model"] = sanitize_text(event.gpu_model, 64)
        if event.duration_s is not None:
            item["duration_s"] = round(event.duration_s, 1)
        if event.cue:
            item["cue"] = sanitize_text(event.cue, 64)
        if event.excerpt and config.max_excerpt_chars > 0:
            item["excerpt"] = sanitize_text(event.excerpt, config.max_excerpt_chars)
        events.append(item)
    return {
        "now": {
            "local_time": local.strftime("%H:%M"),
            "weekday": WEEKDAYS[local.weekday()],
        },
        "history": {
            "jobs_seen": history.n_jobs,
            "jobs_running_or_queued": history.open_jobs,
            "gpus_running_or_queued": history.open_gpus,
            "seconds_since_last_submit": _ago(now, history.last_submit_at),
            "seconds_since_last_finish": _ago(now, history.last_finish_at),
            "gap_between_submits_s": _quantiles(history.gaps, (0.1, 0.5, 0.9)),
            "gap_after_last_activity_s": _quantiles(history.idle_gaps, (0.1, 0.5, 0.9)),
            "gpus_per_job_most_common": [[size, count] for size, count in sizes],
            "gpus_largest_job": history.max_gpus,
            "gpus_last_job": history.last_gpus,
            "job_duration_s": _quantiles(history.durations, (0.5, 0.9)),
            "busiest_local_hours": busiest if history.n_jobs else [],
        },
        "recent_events": events,
    }


def render_messages(
    template: PromptTemplate, context: Context, now: float, config: LlmConfig
) -> list[dict[str, str]]:
    data = fence(context_data(context, now, config))
    return [
        {"role": "system", "content": template.system_text(config)},
        {"role": "user", "content": template.user_text(data)},
    ]
