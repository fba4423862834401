"""Forecasting GPU demand: statistical predictors, the LLM predictor, ensembles, scoring.

Importing this package never imports litellm; the LLM predictor loads it on its first call.
"""

from predictors.base import Predictor
from predictors.burst import BurstPredictor
from predictors.context import Context, ContextBuilder, HistoryBuilder, build_context
from predictors.cues import DEFAULT_CUE_PRIORS, CuePredictor, CuePrior
from predictors.ensemble import Ensemble
from predictors.ewma import EwmaPredictor
from predictors.histogram import HistogramPredictor
from predictors.history import HistoryConfig, UserHistory
from predictors.llm import LlmPredictor
from predictors.llm_config import LlmConfig
from predictors.llm_outcome import LlmOutcome, LlmStatus
from predictors.online import HoldBook
from predictors.scoring import ForecastRecord, JobRecord, Score, covers, match, score
from predictors.seasonality import SeasonalityPredictor
from predictors.stream import StreamForecaster
from predictors.types import ALL_USERS, Cost, Cue, Event, EventKind, Forecast

__all__ = [
    "ALL_USERS",
    "DEFAULT_CUE_PRIORS",
    "BurstPredictor",
    "Context",
    "ContextBuilder",
    "Cost",
    "Cue",
    "CuePredictor",
    "CuePrior",
    "Ensemble",
    "Event",
    "EventKind",
    "EwmaPredictor",
    "Forecast",
    "ForecastRecord",
    "HistogramPredictor",
    "HistoryBuilder",
    "HistoryConfig",
    "HoldBook",
    "JobRecord",
    "LlmConfig",
    "LlmOutcome",
    "LlmPredictor",
    "LlmStatus",
    "Predictor",
    "Score",
    "SeasonalityPredictor",
    "StreamForecaster",
    "UserHistory",
    "build_context",
    "covers",
    "match",
    "score",
]
