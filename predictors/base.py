"""The one interface every predictor implements, and helpers they share."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from predictors.context import Context
from predictors.types import Forecast


@runtime_checkable
class Predictor(Protocol):
    """Turns a user's context into forecasts of GPU demand.

    Contract: deterministic for a given (context, now); never reads the clock (time is `now`);
    returns an empty list when it has nothing to say. Forecast windows end after `now`.
    """

    name: str

    def predict(self, context: Context, now: float) -> list[Forecast]: ...


SIZES = ("last", "mode", "max")


def check_size(size: str) -> str:
    if size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}, not {size!r}")
    return size


def check_probability(name: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], not {value}")
    return value


def check_positive(name: str, value: float) -> float:
    if not value > 0:
        raise ValueError(f"{name} must be positive, not {value}")
    return value
