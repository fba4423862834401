"""The pre-warm policy (configs/prewarm-policy.yaml): what the agent may hold, checked in code."""

from __future__ import annotations

import itertools
import re
from datetime import datetime, tzinfo
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from control_plane.schemas.common import GPU_MODEL_PATTERN
from predictors.llm_config import LlmConfig

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
PREDICTORS = ("burst", "histogram", "cues", "seasonality", "ewma", "llm")
# An end may be 24:00 (midnight at the end of the day), never 24:01..24:59.
_SPAN = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-(?!24:(?!00))([01]\d|2[0-3]|24):([0-5]\d)\Z")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LlmPolicy(Strict):
    """The LLM predictor's settings; the key itself lives in the environment variable named."""

    model: str = Field(min_length=1, max_length=200)
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    api_base: str | None = Field(default=None, max_length=500)
    calls_per_hour: int = Field(default=30, ge=0, le=100_000)
    usd_per_day: float = Field(default=1.0, ge=0, le=100_000)
    timeout_s: float = Field(default=20.0, gt=0, le=600)

    def llm_config(self) -> LlmConfig:
        return LlmConfig(
            model=self.model,
            api_key_env=self.api_key_env,
            api_base=self.api_base,
            calls_per_hour=self.calls_per_hour,
            usd_per_day=self.usd_per_day,
            timeout_s=self.timeout_s,
        )


class Policy(Strict):
    """Every key, its default and unit are described in docs/policy.md."""

    min_confidence: float = Field(default=0.5, ge=0, le=1)
    lead_s: int = Field(default=120, ge=0, le=86400, description="Warm this long before start.")
    hold_ttl_s: int = Field(default=900, ge=30, le=86400, description="Longest claim window.")
    max_horizon_s: int = Field(
        default=3600, ge=60, le=7 * 86400, description="Ignore forecasts starting later than this."
    )
    max_gpus_per_hold: int = Field(default=8, ge=1, le=4096)
    max_gpus_total: int = Field(default=16, ge=1, le=100_000)
    daily_idle_gpu_hours: float = Field(default=4.0, ge=0, le=1_000_000)
    idle_budget: float | None = Field(
        default=None,
        ge=0,
        le=10,
        description="Idle GPU-hours per busy GPU-hour over reactive; set: priced burst.",
    )
    quiet_hours: list[str] = Field(
        default_factory=list, max_length=24, description='Spans "HH:MM-HH:MM" (may wrap midnight).'
    )
    quiet_days: list[Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]] = Field(
        default_factory=list
    )
    timezone: str = Field(default="local", description='"local", "UTC" or an IANA zone name.')
    cooldown_s: dict[str, float] = Field(
        default_factory=lambda: {"default": 300.0},
        description="Seconds after a hold before the same cue may make another; 'default'.",
    )
    cancel_below: float = Field(
        default=0.2, ge=0, le=1, description="Cancel a hold when its support drops below this."
    )
    predictors: list[Literal["burst", "histogram", "cues", "seasonality", "ewma", "llm"]] = Field(
        default_factory=lambda: ["burst", "histogram", "cues", "seasonality"]
    )
    ensemble: Literal["weighted", "select", "off"] = "weighted"
    llm: LlmPolicy | None = None
    warmup: dict[str, str] = Field(
        default_factory=dict, description="Warm-up profile per GPU model; key 'default' for any."
    )
    gpu_model: str | None = Field(default=None, max_length=64, pattern=GPU_MODEL_PATTERN)

    @field_validator("quiet_hours")
    @classmethod
    def _spans(cls, spans: list[str]) -> list[str]:
        minutes: list[tuple[int, int]] = []
        for span in spans:
            match = _SPAN.match(span)
            if match is None:
                raise ValueError(
                    f'quiet hours {span!r}: expected "HH:MM-HH:MM", e.g. "22:00-07:00"'
                )
            h1, m1, h2, m2 = (int(g) for g in match.groups())
            start, end = h1 * 60 + m1, h2 * 60 + m2
            if start == end:
                raise ValueError(f"quiet hours {span!r}: empty span")
            minutes.extend([(start, end)] if start < end else [(start, 1440), (0, end)])
        minutes.sort()
        for (_, end), (start, _) in itertools.pairwise(minutes):
            if start < end:
                raise ValueError(f"quiet hours overlap: {', '.join(spans)}")
        return spans

    @field_validator("cooldown_s")
    @classmethod
    def _cooldowns(cls, value: dict[str, float]) -> dict[str, float]:
        for cue, seconds in value.items():
            if not 0 <= seconds <= 7 * 86400:
                raise ValueError(f"cooldown for {cue!r} must be within 0..604800 s, got {seconds}")
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        if value not in ("local", "UTC"):
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(
                    f'unknown time zone {value!r}: use "local", "UTC" or an IANA '
                    'name such as "Europe/Berlin"'
                ) from None
        return value

    @model_validator(mode="after")
    def _coherent(self) -> Policy:
        if self.max_gpus_per_hold > self.max_gpus_total:
            raise ValueError(
                f"max_gpus_per_hold ({self.max_gpus_per_hold}) exceeds "
                f"max_gpus_total ({self.max_gpus_total})"
            )
        if "llm" in self.predictors and self.llm is None:
            raise ValueError("predictors lists llm but there is no llm section (model, ...)")
        return self

    def zone(self) -> tzinfo | None:
        if self.timezone == "local":
            return None
        return ZoneInfo(self.timezone)

    def local(self, at: float) -> datetime:
        """`at` on the policy's clock (its time zone, or the machine's with "local")."""
        return datetime.fromtimestamp(at, tz=self.zone())

    def day_start(self, at: float) -> float:
        """Midnight starting the policy's day that holds `at`: the daily idle budget's reset."""
        return self.local(at).replace(hour=0, minute=0, second=0, microsecond=0).timestamp()

    def is_quiet(self, at: float) -> bool:
        moment = self.local(at)
        if DAYS[moment.weekday()] in self.quiet_days:
            return True
        now = moment.hour * 60 + moment.minute
        for span in self.quiet_hours:
            h1, m1, h2, m2 = (int(g) for g in _SPAN.match(span).groups())  # type: ignore[union-attr]
            start, end = h1 * 60 + m1, h2 * 60 + m2
            if (start <= now < end) if start < end else (now >= start or now < end):
                return True
        return False

    def cooldown_for(self, cue: str) -> float:
        return self.cooldown_s.get(cue, self.cooldown_s.get("default", 0.0))

    def warmup_for(self, gpu_model: str | None) -> str | None:
        if gpu_model is not None and gpu_model in self.warmup:
            return self.warmup[gpu_model]
        return self.warmup.get("default")
