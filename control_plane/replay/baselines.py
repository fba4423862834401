"""Baseline pre-warm policies: reactive, oracle, keepalive:S, static:N."""

from __future__ import annotations

from collections.abc import Sequence

from control_plane.replay.policies import (
    Control,
    Policy,
    number,
    parse_options,
    register_policy,
)
from control_plane.replay.trace import Job

DEFAULT_KEEPALIVE_S = 600.0
DEFAULT_ACTIVE_S = 3600.0


class Reactive(Policy):
    """No holds: every job waits for free GPUs and then the cold start."""


class Oracle(Policy):
    """Knows every job: a hold of exactly its GPUs, set aside cold-start seconds before it
    arrives and claimable only at that instant. The best any forecast can do, where capacity
    allows (holds never displace running jobs, and real demand preempts them)."""

    def begin(self, jobs: Sequence[Job], ctl: Control) -> None:
        for job in jobs:
            ctl.hold(job.user, job.gpus, job.submit, 0.0)


class KeepAlive(Policy):
    """When a job ends, its GPUs stay warm for its user `keepalive_s` seconds."""

    def __init__(self, keepalive_s: float) -> None:
        self.keepalive_s = keepalive_s

    def on_finish(self, job: Job, now: float, ctl: Control) -> None:
        ctl.retain(job, job.gpus, self.keepalive_s)


class Static(Policy):
    """`per_user` GPUs kept warm and unclaimed for every active user.

    A user is active from their first job until `active_s` after their latest arrival. After
    a job claims warm GPUs the reserve is refilled at once (the new GPUs warm up); a job that
    ends while the reserve is short tops it up with its own, already warm GPUs.
    """

    def __init__(self, per_user: int, active_s: float) -> None:
        self.per_user = per_user
        self.active_s = active_s
        self._last: dict[str, float] = {}

    def on_arrival(self, job: Job, now: float, ctl: Control) -> None:
        until = now + self.active_s
        self._last[job.user] = now
        ctl.extend(job.user, until)
        short = self.per_user - ctl.held_gpus(job.user)
        if short > 0:
            ctl.hold(job.user, short, now, self.active_s)

    def on_finish(self, job: Job, now: float, ctl: Control) -> None:
        until = self._last.get(job.user, now) + self.active_s
        short = self.per_user - ctl.held_gpus(job.user)
        if short > 0 and until > now:
            ctl.retain(job, short, until - now)


def _reactive(arg: str | None) -> Policy:
    parse_options(arg)
    return Reactive()


def _oracle(arg: str | None) -> Policy:
    parse_options(arg)
    return Oracle()


def _keepalive(arg: str | None) -> Policy:
    options = parse_options(arg, positional=("seconds",))
    return KeepAlive(number(options, "seconds", DEFAULT_KEEPALIVE_S))


def _static(arg: str | None) -> Policy:
    options = parse_options(arg, positional=("gpus",), allowed=("active",))
    gpus = number(options, "gpus", 8, minimum=1)
    if gpus != int(gpus):
        raise ValueError("static:N needs a whole number of GPUs")
    return Static(int(gpus), number(options, "active", DEFAULT_ACTIVE_S, minimum=1))


register_policy("reactive", _reactive, "no holds: queue wait + cold start for every job")
register_policy("oracle", _oracle, "knows every job; holds exactly cold-start seconds ahead")
register_policy(
    "keepalive",
    _keepalive,
    f"keepalive:S - a job's GPUs stay warm for its user S s after it ends "
    f"(default {DEFAULT_KEEPALIVE_S:g})",
)
register_policy(
    "static",
    _static,
    f"static:N[,active=S] - N warm GPUs per user active within S s "
    f"(default 8, {DEFAULT_ACTIVE_S:g})",
)
