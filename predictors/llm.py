"""The LLM predictor: litellm with the user's model and key, bounded in time, calls and dollars."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from pydantic import ValidationError

from predictors.context import Context
from predictors.llm_config import LlmConfig
from predictors.llm_guard import CallGuard
from predictors.llm_outcome import LlmOutcome, LlmStatus, classify_error
from predictors.llm_schema import Answer, parse_answer
from predictors.prompting import PromptTemplate, load_prompt, render_messages, sanitize_text
from predictors.types import FREE, Cost, Forecast

log = logging.getLogger(__name__)

_REFUSALS = {
    "backing_off": LlmStatus.BACKING_OFF,
    "rate_capped": LlmStatus.RATE_CAPPED,
    "budget_exhausted": LlmStatus.BUDGET_EXHAUSTED,
}


def load_litellm() -> ModuleType:
    """Import litellm on first use only (seconds and ~165 MB), without network access."""
    # Without this, importing litellm fetches the model price map from the internet; a user's
    # "False" would make every agent start depend on the network, so it is not honoured.
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    import litellm

    litellm.suppress_debug_info = True
    return litellm


class LlmPredictor:
    """Asks the configured model for forecasts; every failure becomes a typed outcome.

    `predict` returns the forecasts (empty on any failure) and never raises; `forecast`
    returns the full `LlmOutcome`, which is also kept in `last_outcome` and passed to
    `on_outcome`. Retries: up to `max_retries` more requests after a timeout, a refused
    connection or a 5xx, and one more after an answer that fails validation (sent back with
    the validation error). litellm's and the OpenAI client's own retries are switched off so
    that every request is counted against the rate limit and the cost cap.

    `completion_kwargs` are passed to `litellm.completion` as they are (extra headers, or
    `mock_response` in tests). Not safe to call from several threads at once: calls are
    serialised by a lock.
    """

    expensive = True

    def __init__(
        self,
        config: LlmConfig,
        *,
        name: str = "llm",
        on_outcome: Callable[[LlmOutcome], None] | None = None,
        completion_kwargs: Mapping[str, Any] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.name = name
        self.on_outcome = on_outcome
        self.completion_kwargs = dict(completion_kwargs or {})
        self._sleep = sleep
        self.template: PromptTemplate = load_prompt(config.prompt, config.prompts_dir)
        self.guard = CallGuard(config.calls_per_hour, config.usd_per_day)
        self.last_outcome: LlmOutcome | None = None
        self._lock = threading.Lock()

    @property
    def prompt_version(self) -> str:
        return self.template.id

    @property
    def last_failed(self) -> bool:
        return self.last_outcome is not None and not self.last_outcome.ok

    @property
    def last_cost(self) -> Cost:
        return FREE if self.last_outcome is None else self.last_outcome.cost

    def predict(self, context: Context, now: float) -> list[Forecast]:
        return list(self.forecast(context, now).forecasts)

    def forecast(self, context: Context, now: float) -> LlmOutcome:
        with self._lock:
            started = time.monotonic()
            try:
                outcome = self._forecast(context, now, started)
            except Exception as exc:  # a bug here must not take the agent down
                log.exception("LLM predictor failed unexpectedly")
                outcome = self._outcome(LlmStatus.ERROR, now, started, error=_short(exc))
            self.last_outcome = outcome
        if outcome.status is not LlmStatus.OK:
            log.warning("LLM forecast %s: %s", outcome.status, outcome.error or "")
        if self.on_outcome is not None:
            try:
                self.on_outcome(outcome)
            except Exception:
                log.exception("on_outcome callback failed")
        return outcome

    def _outcome(self, status: LlmStatus, now: float, started: float, **fields: Any) -> LlmOutcome:
        return LlmOutcome(
            status=status,
            at=now,
            model=self.config.model,
            prompt_version=self.prompt_version,
            latency_s=time.monotonic() - started,
            **fields,
        )

    def _api_key(self) -> str | None:
        if self.config.api_key_env is None:
            return None
        return os.environ.get(self.config.api_key_env) or None

    def _forecast(self, context: Context, now: float, started: float) -> LlmOutcome:
        config = self.config
        refusal = self.guard.refusal(now)
        if refusal is not None:
            return self._outcome(_REFUSALS[refusal], now, started, error=refusal)
        api_key = self._api_key()
        if config.api_key_env is not None and api_key is None:
            return self._outcome(
                LlmStatus.AUTH_ERROR, now, started, error=f"{config.api_key_env} is not set"
            )
        litellm = load_litellm()
        messages: list[dict[str, str]] = render_messages(self.template, context, now, config)
        requests = 0
        transient_retries = 0
        validation_retried = False
        cost = FREE
        cost_known = True
        while True:
            if requests:
                refusal = self.guard.refusal(now)
                if refusal is not None:
                    return self._outcome(
                        _REFUSALS[refusal],
                        now,
                        started,
                        requests=requests,
                        cost=cost,
                        cost_known=cost_known,
                        error=refusal,
                    )
            self.guard.record_request(now)
            requests += 1
            try:
                response = litellm.completion(**self._request(messages, api_key))
            except Exception as exc:
                status, retryable = classify_error(exc)
                if retryable and transient_retries < config.max_retries:
                    transient_retries += 1
                    self._sleep(config.retry_backoff_s * 2 ** (transient_retries - 1))
                    continue
                if status in (LlmStatus.AUTH_ERROR, LlmStatus.RATE_LIMITED):
                    self.guard.back_off(now + config.cooldown_s)
                return self._outcome(
                    status,
                    now,
                    started,
                    requests=requests,
                    cost=cost,
                    cost_known=cost_known,
                    error=_short(exc, api_key),
                )
            call_cost, known = self._cost(litellm, response)
            cost = cost + call_cost
            cost_known = cost_known and known
            self.guard.record_spend(now, call_cost.usd)
            text = _content(response)
            try:
                answer = parse_answer(text)
            except (ValidationError, ValueError) as err:
                if not validation_retried:
                    validation_retried = True
                    messages = [
                        *messages,
                        {"role": "assistant", "content": text[:4000]},
                        {"role": "user", "content": self.template.retry_text(str(err))},
                    ]
                    continue
                return self._outcome(
                    LlmStatus.BAD_ANSWER,
                    now,
                    started,
                    requests=requests,
                    cost=cost,
                    cost_known=cost_known,
                    error=_short(err),
                )
            forecasts, clamped = self._forecasts(answer, context, now, cost)
            return self._outcome(
                LlmStatus.OK,
                now,
                started,
                forecasts=tuple(forecasts),
                requests=requests,
                cost=cost,
                cost_known=cost_known,
                clamped=clamped,
            )

    def _request(self, messages: list[dict[str, str]], api_key: str | None) -> dict[str, Any]:
        config = self.config
        request: dict[str, Any] = {
            "model": config.model,
            "messages": messages,
            "timeout": config.timeout_s,
            "temperature": config.temperature,
            "max_tokens": config.max_tokens,
            # Retries are ours: litellm's would also retry a 401, and the OpenAI client's
            # would multiply with them, hiding requests from the rate limit and the cost cap.
            "num_retries": 0,
            "max_retries": 0,
            "drop_params": True,
        }
        if config.json_mode:
            request["response_format"] = {"type": "json_object"}
        if config.api_base is not None:
            request["api_base"] = config.api_base
        if api_key is not None:
            request["api_key"] = api_key
        request.update(self.completion_kwargs)
        return request

    def _cost(self, litellm: ModuleType, response: Any) -> tuple[Cost, bool]:
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        config = self.config
        if config.input_usd_per_mtok is not None or config.output_usd_per_mtok is not None:
            usd = (
                prompt_tokens * (config.input_usd_per_mtok or 0.0)
                + completion_tokens * (config.output_usd_per_mtok or 0.0)
            ) / 1e6
            return Cost(prompt_tokens, completion_tokens, usd), True
        try:
            usd = float(litellm.completion_cost(completion_response=response))
            known = math.isfinite(usd) and usd >= 0
        except Exception:  # a model litellm has no price for (a local server, say)
            usd, known = 0.0, False
        return Cost(prompt_tokens, completion_tokens, usd if known else 0.0), known

    def _forecasts(
        self, answer: Answer, context: Context, now: float, cost: Cost
    ) -> tuple[list[Forecast], int]:
        """Answer items as forecasts, inside the configured bounds whatever the model said."""
        config = self.config
        largest = context.history.max_gpus
        gpu_bound = config.max_gpus
        if largest:
            gpu_bound = min(gpu_bound, max(1, math.floor(config.max_gpus_factor * largest)))
        items = sorted(answer.forecasts, key=lambda item: -item.confidence)
        clamped = max(0, len(items) - config.max_forecasts)
        forecasts: list[Forecast] = []
        for item in items[: config.max_forecasts]:
            if item.start_in_s > config.max_horizon_s:
                clamped += 1
                continue
            length = item.end_in_s - item.start_in_s
            bounded = min(max(length, config.min_window_s), config.max_window_s)
            gpus = min(item.gpu_count, gpu_bound)
            clamped += int(bounded != length) + int(gpus != item.gpu_count)
            forecasts.append(
                Forecast(
                    start_at=now + item.start_in_s,
                    end_at=now + item.start_in_s + bounded,
                    gpu_count=gpus,
                    confidence=item.confidence,
                    predictor=self.name,
                    rationale=sanitize_text(item.rationale, 200),
                    gpu_model=sanitize_text(item.gpu_model, 64) if item.gpu_model else None,
                    expected_duration_s=item.expected_duration_s,
                    # The call's cost rides on its first forecast, so sums give the spend.
                    cost=cost if not forecasts else FREE,
                    prompt_version=self.prompt_version,
                    user=context.user,
                )
            )
        return forecasts, clamped


def _content(response: Any) -> str:
    try:
        content = response.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def _short(exc: BaseException, secret: str | None = None) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if secret:
        text = text.replace(secret, "***")
    return sanitize_text(text, 300)
