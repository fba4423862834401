"""Prediction logs for the review tests: a small hand-made one whose scores are worked out by
hand (see the comments), and a larger generated one that looks like a real fortnight."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

from predictors.types import Cost, Forecast
from smart_agent.predlog import PredictionLog

T0 = datetime(2026, 3, 2, 9, tzinfo=UTC).timestamp()  # Monday, ISO week 2026-W10
T1 = datetime(2026, 3, 9, 9, tzinfo=UTC).timestamp()  # Monday, ISO week 2026-W11
LATER = T1 + 30 * 86400  # "now" when every window is over
USER = "alice"
INJECTION = '<script>alert("x")</script><img src=x onerror=alert(1)> [red]markup[/red]'


def _open(path: Path) -> PredictionLog:
    log = PredictionLog(path)
    # A test log need not survive a power cut: skip the fsync of every commit (5x faster).
    log._db.execute("PRAGMA synchronous=OFF")
    return log


def _fc(
    start: float,
    end: float,
    gpus: int,
    conf: float,
    predictor: str,
    *,
    rationale: str = "",
    cost: Cost | None = None,
    prompt: str | None = None,
) -> Forecast:
    return Forecast(
        start,
        end,
        gpus,
        conf,
        predictor,
        rationale=rationale,
        cost=cost or Cost(),
        prompt_version=prompt,
        user=USER,
    )


def hand_made_log(path: Path) -> dict[str, int]:
    """Two ISO weeks of one user; returns the forecast and job ids the tests refer to.

    Shadow members: burst (statistical, the baseline) and llm. The agent acts on the
    ensemble's forecasts. Holds: h1 claimed by j1, h2 expired, h3 cancelled, h4 claimed by
    j6, h5 still pending; one forecast refused by the server, two rejected by the policy.
    Jobs: j1 warm (1.0 s), j2 cold 90 s, j3 cold 110 s, j4 without GPUs, j5 cold 100 s,
    j6 warm (0.5 s). Cold median 100 s, warm median 0.75 s.
    """
    log = _open(path)
    ids: dict[str, int] = {}

    def cycle(at: float, cue: str | None = None, context: dict | None = None) -> int:
        trigger = "cue" if cue else "timer"
        return log.cycle(at=at, user=USER, trigger=trigger, cue=cue, context=context)

    def put(
        name: str,
        f: Forecast,
        cid: int,
        at: float,
        decision: str,
        reason: str,
        cue: str | None = None,
    ) -> None:
        ids[name] = log.forecast(
            f, cycle_id=cid, made_at=at, user=USER, decision=decision, reason=reason, cue=cue
        )

    def job(
        name: str, at: float, gpus: int, ttg: float, warm: bool, hold: str | None = None
    ) -> None:
        ids[name] = log.job(
            at=at, user=USER, gpus=gpus, gpu_model=None, source="test", job_ref=name
        )
        log.job_update(ids[name], time_to_gpu_s=ttg, warm=warm, hold_id=hold)

    # --- week W10 ---------------------------------------------------------------------
    context = {"user": USER, "jobs": 3, "recent": [{"kind": "cue", "excerpt": INJECTION}]}
    c1 = cycle(T0, "preprocessing_done", context)
    put("c1_burst", _fc(T0 + 60, T0 + 660, 2, 0.8, "burst"), c1, T0, "shadow", "burst in shadow")
    llm1 = _fc(
        T0 + 300,
        T0 + 900,
        2,
        0.9,
        "llm",
        rationale=INJECTION,
        cost=Cost(1000, 200, 0.01),
        prompt="v3",
    )
    put("c1_llm", llm1, c1, T0, "shadow", "llm in shadow", "preprocessing_done")
    put(
        "c1_acted",
        _fc(T0 + 60, T0 + 900, 2, 0.85, "ensemble", rationale=INJECTION),
        c1,
        T0,
        "accepted",
        "accepted",
        "preprocessing_done",
    )
    log.hold_made(ids["c1_acted"], hold_id="h1", gpus=2)
    job("j1", T0 + 600, 2, 1.0, True, "h1")
    log.hold_outcome(
        "h1",
        outcome="claimed",
        at=T0 + 600,
        claimed_at=T0 + 600,
        job_id=ids["j1"],
        idle_gpu_minutes=18.0,
    )
    log.llm_call(
        at=T0,
        status="ok",
        model="m",
        prompt_version="v3",
        prompt_tokens=1000,
        completion_tokens=200,
        usd=0.01,
        latency_s=1.2,
        detail=None,
    )

    c2 = cycle(T0 + 700)
    put("c2_burst", _fc(T0 + 700, T0 + 1300, 2, 0.6, "burst"), c2, T0 + 700, "shadow", "s")
    llm2 = _fc(T0 + 3000, T0 + 3600, 1, 0.3, "llm", cost=Cost(1500, 300, 0.02), prompt="v3")
    put("c2_llm", llm2, c2, T0 + 700, "shadow", "s")
    put("c2_acted", _fc(T0 + 700, T0 + 1300, 2, 0.6, "ensemble"), c2, T0 + 700, "accepted", "ok")
    log.hold_made(ids["c2_acted"], hold_id="h2", gpus=2)
    log.hold_outcome("h2", outcome="expired", at=T0 + 1300, idle_gpu_minutes=20.0)
    put(
        "c2_rejected",
        _fc(T0 + 3000, T0 + 3600, 1, 0.3, "ensemble"),
        c2,
        T0 + 700,
        "rejected",
        "confidence 0.30 below min_confidence 0.50",
    )
    log.llm_call(
        at=T0 + 700,
        status="ok",
        model="m",
        prompt_version="v3",
        prompt_tokens=1500,
        completion_tokens=300,
        usd=0.02,
        latency_s=1.0,
        detail=None,
    )

    c3 = cycle(T0 + 710)  # a repeat: burst's window is already held
    put("c3_burst", _fc(T0 + 710, T0 + 1310, 2, 0.6, "burst"), c3, T0 + 710, "shadow", "s")
    put(
        "c3_rejected",
        _fc(T0 + 710, T0 + 1310, 2, 0.6, "ensemble"),
        c3,
        T0 + 710,
        "rejected",
        "an active hold already covers this window",
    )
    job("j2", T0 + 3200, 1, 90.0, False)
    job("j3", T0 + 4000, 2, 110.0, False)
    job("j4", T0 + 5000, 0, 5.0, False)  # no GPUs: not scored

    c4 = cycle(T0 + 7200, "epoch_end")
    put(
        "c4_burst",
        _fc(T0 + 7200, T0 + 7800, 1, 0.7, "burst"),
        c4,
        T0 + 7200,
        "shadow",
        "s",
        "epoch_end",
    )
    put(
        "c4_acted",
        _fc(T0 + 7200, T0 + 7800, 1, 0.7, "ensemble"),
        c4,
        T0 + 7200,
        "accepted",
        "accepted",
        "epoch_end",
    )
    log.hold_refused(
        ids["c4_acted"], reason="server: speculative_budget_exceeded: max_held_gpus 1", at=T0 + 7200
    )
    job("j5", T0 + 7500, 1, 100.0, False)

    # --- week W11 ---------------------------------------------------------------------
    c5 = cycle(T1)
    put("c5_burst", _fc(T1, T1 + 600, 4, 0.9, "burst"), c5, T1, "shadow", "s")
    llm5 = _fc(T1 + 100, T1 + 700, 4, 0.5, "llm", cost=Cost(2000, 400, 0.03), prompt="v3")
    put("c5_llm", llm5, c5, T1, "shadow", "s")
    put("c5_acted", _fc(T1, T1 + 700, 4, 0.9, "ensemble"), c5, T1, "accepted", "accepted")
    log.hold_made(ids["c5_acted"], hold_id="h3", gpus=4)
    log.hold_outcome("h3", outcome="cancelled", at=T1 + 300, idle_gpu_minutes=20.0)
    log.llm_call(
        at=T1,
        status="ok",
        model="m",
        prompt_version="v3",
        prompt_tokens=2000,
        completion_tokens=400,
        usd=0.03,
        latency_s=1.1,
        detail=None,
    )

    c6 = cycle(T1 + 1000)
    put("c6_burst", _fc(T1 + 1000, T1 + 1600, 1, 0.4, "burst"), c6, T1 + 1000, "shadow", "s")
    put("c6_acted", _fc(T1 + 1000, T1 + 1600, 1, 0.4, "ensemble"), c6, T1 + 1000, "accepted", "a")
    log.hold_made(ids["c6_acted"], hold_id="h4", gpus=1)
    job("j6", T1 + 1200, 1, 0.5, True, "h4")
    log.hold_outcome(
        "h4",
        outcome="claimed",
        at=T1 + 1200,
        claimed_at=T1 + 1200,
        job_id=ids["j6"],
        idle_gpu_minutes=200 / 60,
    )
    log.llm_call(
        at=T1 + 1000,
        status="error",
        model="m",
        prompt_version="v3",
        prompt_tokens=500,
        completion_tokens=0,
        usd=0.005,
        latency_s=30.0,
        detail="timeout",
    )

    c7 = cycle(T1 + 5000)
    put("c7_burst", _fc(T1 + 5000, T1 + 5600, 2, 0.5, "burst"), c7, T1 + 5000, "shadow", "s")
    put("c7_acted", _fc(T1 + 5000, T1 + 5600, 2, 0.5, "ensemble"), c7, T1 + 5000, "accepted", "a")
    log.hold_made(ids["c7_acted"], hold_id="h5", gpus=2)  # never resolved: pending
    log.close()
    return ids


def representative_log(path: Path, *, days: int = 10, seed: int = 7) -> None:
    """A fortnight-like log: work sessions of a few jobs on weekdays, each often announced by
    a cue (and some cues with no job after them); burst, histogram and an LLM in shadow; the
    most confident forecast acted on under a simple policy (confidence >= 0.5, no window held
    twice); holds claimed by the jobs they cover, else expired or now and then cancelled."""
    rnd = random.Random(seed)
    log = _open(path)
    start = datetime(2026, 3, 2, tzinfo=UTC).timestamp()
    events: list[tuple[float, str, int]] = []  # (at, "job" | "cue", gpus)
    for day in range(days):
        if day % 7 in (5, 6) and rnd.random() < 0.7:
            continue
        for _ in range(rnd.randint(1, 3)):
            at = start + day * 86400 + rnd.uniform(8, 18) * 3600
            gpus = rnd.choice((1, 2, 2, 4))
            if rnd.random() < 0.75:
                events.append((at - rnd.uniform(120, 900), "cue", gpus))
            for _ in range(rnd.randint(1, 5)):
                events.append((at, "job", gpus))
                at += rnd.uniform(300, 1500)
        if rnd.random() < 0.6:  # a cue no job follows
            events.append((start + day * 86400 + rnd.uniform(9, 20) * 3600, "cue", 2))
    events.sort()
    holds: dict[str, list[float]] = {}  # id -> [start, end, gpus, made]
    claimed: dict[str, tuple[float, int]] = {}
    last_job = -1e18
    for at, kind, gpus in events:
        if kind == "job":
            free = [h for h, (s, e, g, _) in holds.items() if s <= at <= e and g >= gpus]
            hold = next((h for h in free if h not in claimed), None)
            ttg = rnd.uniform(0.2, 1.5) if hold else rnd.uniform(80, 160)
            jid = log.job(
                at=at,
                user=USER,
                gpus=gpus,
                gpu_model="H100",
                source="slurm",
                job_ref=f"{int(at) % 100000}",
            )
            log.job_update(jid, time_to_gpu_s=round(ttg, 2), warm=hold is not None, hold_id=hold)
            if hold:
                claimed[hold] = (at, jid)
            last_job = at
        cue = "preprocessing_done" if kind == "cue" else None
        made = at + (0 if cue else 5)
        context = {"user": USER, "recent": [{"kind": kind, "excerpt": cue}]}
        trigger = "cue" if cue else "job"
        cid = log.cycle(at=made, user=USER, trigger=trigger, cue=cue, context=context)
        low = round(rnd.uniform(0.05, 0.45), 2)
        members = [_fc(made + 600, made + 3600, rnd.choice((1, 2)), low, "histogram")]
        if made - last_job < 1800:
            conf = round(rnd.uniform(0.35, 0.9), 2)
            members.append(_fc(made + 30, made + 1200, gpus, conf, "burst"))
        if cue:
            usd = round(rnd.uniform(0.002, 0.012), 4)
            members.append(
                _fc(
                    made + 60,
                    made + 1500,
                    gpus,
                    round(rnd.uniform(0.55, 0.95), 2),
                    "llm",
                    rationale="the log says preprocessing finished; training usually follows",
                    cost=Cost(1800, 220, usd),
                    prompt="v3",
                )
            )
            log.llm_call(
                at=made,
                status="error" if rnd.random() < 0.08 else "ok",
                model="gpt-4o-mini",
                prompt_version="v3",
                prompt_tokens=1800,
                completion_tokens=220,
                usd=usd,
                latency_s=1.3,
                detail=None,
            )
        for f in members:
            log.forecast(
                f,
                cycle_id=cid,
                made_at=made,
                user=USER,
                decision="shadow",
                reason=f"{f.predictor} in shadow",
                cue=cue,
            )
        best = max(members, key=lambda f: f.confidence)
        f = Forecast(
            best.start_at,
            best.end_at,
            best.gpu_count,
            best.confidence,
            "ensemble",
            rationale=best.rationale,
            user=USER,
        )
        covered = any(
            s <= f.end_at and f.start_at <= e and g >= f.gpu_count and e >= made
            for h, (s, e, g, _) in holds.items()
            if h not in claimed
        )
        if covered:
            decision, reason = "rejected", "an active hold already covers this window"
        elif f.confidence < 0.5:
            decision, reason = (
                "rejected",
                f"confidence {f.confidence:.2f} below min_confidence 0.50",
            )
        else:
            decision, reason = "accepted", "accepted"
        fid = log.forecast(
            f, cycle_id=cid, made_at=made, user=USER, decision=decision, reason=reason, cue=cue
        )
        if decision == "accepted":
            log.hold_made(fid, hold_id=f"h{fid}", gpus=f.gpu_count)
            holds[f"h{fid}"] = [f.start_at, f.end_at, f.gpu_count, made]
    for h, (s, e, g, made) in holds.items():
        placed = max(s, made)
        if h in claimed:
            at, jid = claimed[h]
            log.hold_outcome(
                h,
                outcome="claimed",
                at=at,
                claimed_at=at,
                job_id=jid,
                idle_gpu_minutes=g * (at - placed) / 60,
            )
        elif rnd.random() < 0.15:
            at = placed + (e - placed) / 2
            log.hold_outcome(h, outcome="cancelled", at=at, idle_gpu_minutes=g * (at - placed) / 60)
        else:
            log.hold_outcome(h, outcome="expired", at=e, idle_gpu_minutes=g * (e - placed) / 60)
    log.close()
