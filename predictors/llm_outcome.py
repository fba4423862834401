"""Typed outcomes of an LLM forecast call, and the mapping from provider errors to them."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from predictors.types import FREE, Cost, Forecast


class LlmStatus(StrEnum):
    OK = "ok"
    TIMEOUT = "timeout"
    AUTH_ERROR = "auth_error"  # 401/403, or the key's environment variable is unset
    RATE_LIMITED = "rate_limited"  # the provider said 429
    CONNECTION_ERROR = "connection_error"  # refused, reset, DNS...
    PROVIDER_ERROR = "provider_error"  # any other error status from the provider
    BAD_ANSWER = "bad_answer"  # not valid against the schema, even after one retry
    BUDGET_EXHAUSTED = "budget_exhausted"  # the daily cost cap is reached: no request sent
    RATE_CAPPED = "rate_capped"  # our own calls-per-hour limit: no request sent
    BACKING_OFF = "backing_off"  # paused after a 401 or 429: no request sent
    ERROR = "error"  # anything else (a bug): logged, never raised


@dataclass(frozen=True, slots=True)
class LlmOutcome:
    """What one `forecast` call did; the caller logs it (it holds no prompt or log text)."""

    status: LlmStatus
    at: float
    model: str
    prompt_version: str
    forecasts: tuple[Forecast, ...] = ()
    requests: int = 0
    cost: Cost = field(default=FREE)
    cost_known: bool = True
    latency_s: float = 0.0
    clamped: int = 0  # answer values brought inside the bounds, or forecasts dropped
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is LlmStatus.OK

    def to_log(self) -> dict[str, Any]:
        """A flat, JSON-able record for the prediction log."""
        return {
            "status": str(self.status),
            "at": self.at,
            "model": self.model,
            "prompt_version": self.prompt_version,
            "forecasts": len(self.forecasts),
            "requests": self.requests,
            "prompt_tokens": self.cost.prompt_tokens,
            "completion_tokens": self.cost.completion_tokens,
            "usd": self.cost.usd,
            "cost_known": self.cost_known,
            "latency_s": round(self.latency_s, 4),
            "clamped": self.clamped,
            "error": self.error,
        }


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen) and len(seen) < 16:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def classify_error(exc: BaseException) -> tuple[LlmStatus, bool]:
    """(status, worth retrying) for an exception out of `litellm.completion`.

    Called only after litellm is loaded. A refused connection surfaces from litellm as an
    InternalServerError, so the cause chain is searched before the status code is trusted.
    """
    import httpx
    import litellm
    import openai

    chain = _chain(exc)
    if isinstance(exc, litellm.Timeout) or any(
        isinstance(e, httpx.TimeoutException | openai.APITimeoutError | TimeoutError) for e in chain
    ):
        return LlmStatus.TIMEOUT, True
    # Some providers' 403s come through as a plain APIError: the status code decides too.
    status_code = getattr(exc, "status_code", None)
    if status_code in (401, 403) or isinstance(
        exc, litellm.AuthenticationError | litellm.PermissionDeniedError
    ):
        return LlmStatus.AUTH_ERROR, False
    if status_code == 429 or isinstance(exc, litellm.RateLimitError):
        return LlmStatus.RATE_LIMITED, False
    if any(
        isinstance(e, openai.APIConnectionError | httpx.TransportError | ConnectionError)
        for e in chain
    ):
        return LlmStatus.CONNECTION_ERROR, True
    if isinstance(status_code, int) and status_code >= 500:
        return LlmStatus.PROVIDER_ERROR, True
    if isinstance(exc, openai.APIError):
        return LlmStatus.PROVIDER_ERROR, False
    return LlmStatus.ERROR, False
