"""Trace replay: drives the scheduling core with pre-warm policies in virtual time."""

from control_plane.replay.api import replay_jobs, run_replay
from control_plane.replay.forecast import ForecastPolicy, register_forecaster, sweep
from control_plane.replay.policies import (
    Control,
    Policy,
    available_policies,
    make_policy,
    register_policy,
)
from control_plane.replay.report import format_json, format_misses, format_results, format_table
from control_plane.replay.trace import Job, TraceError, load_trace

__all__ = [
    "Control",
    "ForecastPolicy",
    "Job",
    "Policy",
    "TraceError",
    "available_policies",
    "format_json",
    "format_misses",
    "format_results",
    "format_table",
    "load_trace",
    "make_policy",
    "register_forecaster",
    "register_policy",
    "replay_jobs",
    "run_replay",
    "sweep",
]
