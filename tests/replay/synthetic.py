"""Synthetic traces the replay tests share: random submitters, and one hidden by another."""

from __future__ import annotations

import random

from control_plane.replay.trace import Job

Row = tuple[str, float, int, float]  # user, submit, GPUs, duration


def as_jobs(rows: list[Row]) -> list[Job]:
    """Jobs in submit order, numbered in that order."""
    ordered = sorted(rows, key=lambda r: r[1])
    return [Job(i, f"j{i}", u, s, g, d) for i, (u, s, g, d) in enumerate(ordered)]


def random_rows(user: str, days: float, rng: random.Random) -> list[Row]:
    """`user` submits 2-GPU jobs of 600 s at random, a mean 1500 s apart, for `days`."""
    rows: list[Row] = []
    t = 0.0
    while t < days * 86400:
        t += rng.expovariate(1 / 1500.0)
        rows.append((user, float(round(t)), 2, 600.0))
    return rows


def random_submitters(users: str, days: float, seed: int = 7) -> list[Job]:
    """Each of `users` (one letter each) submits as `random_rows` does."""
    rng = random.Random(seed)
    return as_jobs([row for user in users for row in random_rows(user, days, rng)])


def hidden_user(days: float = 2.0) -> list[Job]:
    """User a submits 2-GPU jobs at random (mean gap 1500 s): holds for a are mostly idle.
    User c runs 8 GPUs around the clock in 4-hour jobs: busy time that dilutes the cluster's
    ratio, so a cluster-wide controller alone lets a idle far over the budget."""
    rows = random_rows("a", days, random.Random(11))
    rows += [("c", 14400.0 * i + 5, 8, 14400.0) for i in range(int(days * 6))]
    return as_jobs(rows)
