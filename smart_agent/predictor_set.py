"""Builds the predictors a policy names, and keeps each member's own forecasts for the log."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from predictors import (
    BurstPredictor,
    CuePredictor,
    Ensemble,
    EwmaPredictor,
    HistogramPredictor,
    SeasonalityPredictor,
)
from predictors.budget import price_for_budget
from predictors.context import Context
from predictors.llm_outcome import LlmOutcome
from predictors.types import Forecast
from smart_agent.policy import Policy

BASELINE = "burst"


class Recorded:
    """A predictor whose last forecasts are kept, so every member can be logged in shadow."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name: str = inner.name
        self.expensive = getattr(inner, "expensive", False)
        self.last: list[Forecast] = []
        self.asked = False
        self.raised = False

    @property
    def last_failed(self) -> bool:
        return self.raised or bool(getattr(self.inner, "last_failed", False))

    def forget(self) -> None:
        """Before a call: an ensemble may skip this member, whose last answer is then stale."""
        self.last, self.asked, self.raised = [], False, False

    @property
    def last_cost(self) -> Any:
        return getattr(self.inner, "last_cost", None)

    def predict(self, context: Context, now: float) -> list[Forecast]:
        self.last, self.asked, self.raised = [], True, False
        try:
            self.last = list(self.inner.predict(context, now))
        except Exception:
            self.raised = True
            raise
        return self.last


def _statistical(name: str, policy: Policy | None = None) -> Any:
    if name == "burst" and policy is not None and policy.idle_budget is not None:
        # An idle budget asks for the priced burst forecast (the replay's `--policy default`):
        # windows worth their idle at the price that holds that budget, warming for up to
        # four jobs of a clump, the ending job's GPUs kept.
        return BurstPredictor(
            6 * 3600.0,  # the longest window a priced forecast may choose
            max_jobs=4,
            size="ending",
            value_fit=False,
            price=price_for_budget(policy.idle_budget),
            lead_s=max(1.0, float(policy.lead_s)),
        )
    return {
        "burst": BurstPredictor,
        "histogram": HistogramPredictor,
        "cues": CuePredictor,
        "seasonality": SeasonalityPredictor,
        "ewma": EwmaPredictor,
    }[name]()


class PredictorSet:
    """The members a policy asks for, combined as the policy says (ensemble or union)."""

    def __init__(
        self,
        policy: Policy,
        *,
        on_llm_outcome: Callable[[LlmOutcome], None] | None = None,
        llm_kwargs: dict[str, Any] | None = None,
    ) -> None:
        members: list[Recorded] = []
        for name in policy.predictors:
            if name == "llm":
                members.append(Recorded(self._llm(policy, on_llm_outcome, llm_kwargs or {})))
            else:
                members.append(Recorded(_statistical(name, policy)))
        # The LLM never runs alone: a failed call (timeout, 429, budget spent) falls back to a
        # statistical predictor, and the LLM is scored against one.
        self.fallback: Recorded | None = None
        # With the ensemble the fallback is a member (the ensemble falls back to it); in the
        # union it stands aside and is asked only when every member failed.
        self._reserve: list[Recorded] = []
        if all(m.expensive for m in members):
            self.fallback = Recorded(_statistical(BASELINE, policy))
            if policy.ensemble != "off":
                members.append(self.fallback)
            else:
                self._reserve.append(self.fallback)
        self.members = members
        names = [m.name for m in members]
        cheap = [m.name for m in members if not m.expensive]
        baseline = BASELINE if BASELINE in cheap else (cheap or names)[0]
        self.ensemble = (
            None
            if policy.ensemble == "off"
            else Ensemble(members, baseline=baseline, mode=policy.ensemble)
        )

    @staticmethod
    def _llm(
        policy: Policy, on_outcome: Callable[[LlmOutcome], None] | None, kwargs: dict[str, Any]
    ) -> Any:
        from predictors.llm import LlmPredictor  # litellm is heavy: load it only when used

        assert policy.llm is not None  # the policy validator guarantees it
        return LlmPredictor(
            policy.llm.llm_config(), on_outcome=on_outcome, completion_kwargs=kwargs
        )

    def predict(self, context: Context, now: float) -> list[Forecast]:
        for member in self.members:
            member.forget()
        if self.ensemble is not None:
            return self.ensemble.predict(context, now)
        out = _union(self.members, context, now)
        for reserve in self._reserve:
            reserve.forget()
        if self._reserve and all(m.last_failed for m in self.members):
            out.extend(_union(self._reserve, context, now))
        return out

    def _everyone(self) -> list[Recorded]:
        return [*self.members, *self._reserve]

    def priced(self) -> list[BurstPredictor]:
        """The members forecasting at a price, which the agent's budget steering moves."""
        return [
            m.inner
            for m in self._everyone()
            if isinstance(m.inner, BurstPredictor) and m.inner.price is not None
        ]

    def unheard(self) -> set[str]:
        """Members that gave no usable answer on the last call: they failed (an error, a
        rate cap, the day's budget spent) or were not asked. Their silence is no evidence."""
        return {m.name for m in self._everyone() if not m.asked or m.last_failed}

    def shadow(self) -> dict[str, list[Forecast]]:
        """Each member's forecasts of the last call, acted on or not."""
        return {m.name: m.last for m in self._everyone()}


def _union(members: list[Recorded], context: Context, now: float) -> list[Forecast]:
    out: list[Forecast] = []
    for member in members:
        try:
            out.extend(member.predict(context, now))
        except Exception:  # one member must not stop the others
            member.last = []
    return out
