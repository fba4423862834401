"""Pre-warm policy interface for replay, and the registry that builds policies by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from control_plane.replay.trace import Job
from predictors.budget import Totals


class Control(Protocol):
    """What a policy may do to the simulated cluster (the replay engine implements it)."""

    @property
    def now(self) -> float: ...

    @property
    def cold_start_s(self) -> float: ...

    def hold(self, user: str, gpus: int, at: float, ttl_s: float, confidence: float = 1.0) -> None:
        """`user` will need `gpus` GPUs at `at`: set them aside `cold_start_s` before, so they
        are warm at `at`, and keep them claimable until `at + ttl_s`. If `at - cold_start_s`
        has passed they are set aside now and warm later than `at`."""
        ...

    def retain(self, job: Job, gpus: int, ttl_s: float, confidence: float = 1.0) -> int:
        """Only while `job` finishes: keep up to `gpus` of its GPUs warm for its user for
        `ttl_s` more seconds (they are already warm). Returns how many were kept."""
        ...

    def held_gpus(self, user: str) -> int:
        """GPUs set aside for `user` now (warming or ready) plus holds not yet placed."""
        ...

    def extend(self, user: str, until: float) -> None:
        """Keep every hold of `user` (placed or not) claimable until at least `until`."""
        ...

    def keep(self, user: str, gpus: int, until: float) -> None:
        """Keep at least `gpus` of the GPUs set aside or asked for `user` claimable until
        `until`, extending the holds that last longest first (fewest changed)."""
        ...

    def release(self, user: str) -> None:
        """End every hold of `user` now."""
        ...

    def totals(self) -> Totals:
        """Running GPU-second totals so far: busy, idle, and what reactive would idle."""
        ...

    def user_totals(self, user: str) -> Totals:
        """The same totals for one user's jobs and holds."""
        ...


class Policy:
    """A pre-warm policy: hooks called in virtual time; the default does nothing (reactive).

    `tick_s`: when set, `on_tick` is called every `tick_s` seconds of virtual time while
    jobs remain. `name` is set by the registry to the spec that built the policy.
    """

    name: str = "policy"
    tick_s: float | None = None

    def begin(self, jobs: Sequence[Job], ctl: Control) -> None:
        """Called once before the first event, with the whole trace (only an oracle looks)."""

    def on_arrival(self, job: Job, now: float, ctl: Control) -> None:
        """Called after `job` arrived and was started or queued."""

    def on_finish(self, job: Job, now: float, ctl: Control) -> None:
        """Called as `job` ends, before its GPUs are freed (see `Control.retain`)."""

    def on_tick(self, now: float, ctl: Control) -> None:
        """Called every `tick_s` seconds."""

    def adopt(self, trained: Policy) -> None:
        """Start from what `trained` (built from the same spec) learnt on earlier days; the
        default learns nothing worth carrying over."""


PolicyFactory = Callable[[str | None], Policy]

_REGISTRY: dict[str, tuple[PolicyFactory, str]] = {}


def register_policy(
    name: str, factory: PolicyFactory, summary: str = "", *, replace: bool = False
) -> None:
    """Make `--policy NAME[:ARGS]` build a policy: `factory(ARGS or None)`."""
    if not name or ":" in name or "," in name:
        raise ValueError(f"bad policy name {name!r}")
    if name in _REGISTRY and not replace:
        raise ValueError(f"policy {name!r} is already registered")
    _REGISTRY[name] = (factory, summary)


def available_policies() -> dict[str, str]:
    """Registered policy names and their one-line summaries, sorted by name."""
    return {name: _REGISTRY[name][1] for name in sorted(_REGISTRY)}


def split_spec(spec: str) -> tuple[str, str | None]:
    """`keepalive:600` -> ("keepalive", "600"); `reactive` -> ("reactive", None)."""
    name, sep, arg = spec.strip().partition(":")
    return name.strip(), (arg.strip() if sep else None)


def make_policy(spec: str) -> Policy:
    """Build the policy a spec names; ValueError with the known names when it is unknown."""
    name, arg = split_spec(spec)
    entry = _REGISTRY.get(name)
    if entry is None:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise ValueError(f"unknown policy {name!r}; known: {known}")
    try:
        policy = entry[0](arg)
    except ValueError as exc:
        raise ValueError(f"policy {spec!r}: {exc}") from exc
    policy.name = spec.strip()
    return policy


def parse_options(
    arg: str | None, positional: Sequence[str] = (), allowed: Sequence[str] = ()
) -> dict[str, str]:
    """Options of a spec argument: `8,active=3600` with positional ("n",) -> n=8, active=3600.

    Bare values fill `positional` names in order; `key=value` pairs must be in `allowed`
    or `positional`.
    """
    options: dict[str, str] = {}
    if not arg:
        return options
    names = list(positional)
    for i, part in enumerate(p.strip() for p in arg.split(",")):
        if not part:
            continue
        key, eq, value = part.partition("=")
        if not eq:
            if i >= len(names):
                raise ValueError(f"unexpected value {part!r}")
            key, value = names[i], part
        key = key.strip()
        if key not in names and key not in allowed:
            expected = ", ".join([*names, *allowed]) or "no options"
            raise ValueError(f"unknown option {key!r} (expected {expected})")
        if key in options:
            raise ValueError(f"option {key!r} given twice")
        options[key] = value.strip()
    return options


def number(options: dict[str, str], key: str, default: float, *, minimum: float = 0.0) -> float:
    """A numeric option (seconds, counts), at least `minimum`."""
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"option {key!r}: {raw!r} is not a number") from None
    if value < minimum or value != value:
        raise ValueError(f"option {key!r}: must be at least {minimum:g}")
    return value
