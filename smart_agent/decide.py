"""Policy decisions on forecasts, in code: whatever a predictor (or a log) says, these bound it."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from predictors.types import Forecast
from smart_agent.policy import Policy

MIN_TTL_S = 60
# A model name read from a log is sent only as one plain word: a name with spaces ("RTX 4090")
# is taken from the user's policy (checked against the control plane's pattern at load), never
# from log text, which must not reach the control plane.
LOG_GPU_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

log = logging.getLogger("jitgpu.agent")


@dataclass(frozen=True)
class HoldIntent:
    """A hold request as it will be sent: counts, model, window and confidence; no log text."""

    gpu_count: int
    gpu_model: str | None
    start_at: float
    ttl_s: int
    lead_s: int
    confidence: float
    warmup: str | None


@dataclass(frozen=True)
class Decision:
    accepted: bool
    reason: str
    intent: HoldIntent | None = None


@dataclass
class HeldWindow:
    start_at: float
    end_at: float
    gpu_count: int
    gpu_model: str | None


@dataclass
class PolicyState:
    """What the decision needs to know about the agent's holds right now."""

    held_gpus: int = 0
    idle_gpu_hours_today: float = 0.0
    last_hold_at: dict[str, float] = field(default_factory=dict)
    windows: list[HeldWindow] = field(default_factory=list)


def decide(
    policy: Policy,
    forecast: Forecast,
    *,
    now: float,
    state: PolicyState,
    cue: str | None = None,
    job_cap: tuple[int, str] | None = None,
) -> Decision:
    """Accept (with the hold to request) or refuse a forecast, always with the reason.
    `job_cap`: the most GPUs one job may use and why (the agent's max_job_gpus)."""
    if forecast.confidence < policy.min_confidence:
        return Decision(
            False,
            f"confidence {forecast.confidence:.2f} below min_confidence "
            f"{policy.min_confidence:.2f}",
        )
    if forecast.end_at <= now:
        return Decision(False, "window already over")
    start = max(forecast.start_at, now)
    if start - now > policy.max_horizon_s:
        return Decision(
            False, f"starts in {start - now:.0f}s, beyond max_horizon_s {policy.max_horizon_s}"
        )
    if policy.is_quiet(start):
        return Decision(False, "start falls in quiet hours/days")
    if cue is not None:
        last = state.last_hold_at.get(cue)
        wait = policy.cooldown_for(cue)
        if last is not None and now - last < wait:
            return Decision(False, f"cooldown for cue {cue!r}: {now - last:.0f}s of {wait:.0f}s")
    model = forecast.gpu_model or policy.gpu_model
    for held in state.windows:
        if (
            held.start_at <= forecast.end_at
            and start <= held.end_at
            and held.gpu_count >= forecast.gpu_count
            and held.gpu_model in (None, model)
        ):
            return Decision(False, "an active hold already covers this window")
    gpus = forecast.gpu_count
    reason = "accepted"
    if gpus > policy.max_gpus_per_hold:
        # A forecast (or a log line feeding one) asking for more is clipped, never obeyed.
        reason = f"accepted, clipped from {gpus} to max_gpus_per_hold {policy.max_gpus_per_hold}"
        gpus = policy.max_gpus_per_hold
    if job_cap is not None and gpus > job_cap[0]:
        # No hold bigger than one job of this user can take (a misread size in the history).
        reason = f"accepted, clipped from {forecast.gpu_count} to max_job_gpus {job_cap[0]} "
        reason += f"({job_cap[1]})"
        gpus = job_cap[0]
    if state.held_gpus + gpus > policy.max_gpus_total:
        return Decision(
            False,
            f"{state.held_gpus} GPUs held + {gpus} would exceed "
            f"max_gpus_total {policy.max_gpus_total}",
        )
    if state.idle_gpu_hours_today >= policy.daily_idle_gpu_hours:
        return Decision(
            False,
            f"idle GPU-hours today {state.idle_gpu_hours_today:.2f} reached "
            f"daily_idle_gpu_hours {policy.daily_idle_gpu_hours}",
        )
    ttl = int(min(policy.hold_ttl_s, max(MIN_TTL_S, forecast.end_at - start)))
    intent = HoldIntent(
        gpu_count=gpus,
        gpu_model=model,
        start_at=start,
        ttl_s=ttl,
        lead_s=policy.lead_s,
        confidence=round(forecast.confidence, 4),
        warmup=policy.warmup_for(model),
    )
    return Decision(True, reason, intent)


def wire_gpu_model(model: str | None, configured: str | None = None) -> str | None:
    """`model` as sent to the control plane, else None (any model).

    The policy's own `configured` model goes as it is; any other can come from a log line, and
    whatever it says, only a plain one-word name is sent.
    """
    if model is None or model == configured or LOG_GPU_MODEL.fullmatch(model):
        return model
    log.debug("GPU model %r is not a plain model name: asking for any model", model[:80])
    return None
