"""Heterogeneous Slurm jobs (`700+0`, `700+1`, ...): one job with the GPUs of all its
components, ended when every component has."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from predictors.types import EventKind
from smart_agent.parsers import SacctParser, SqueueParser
from smart_agent.parsers.slurm import merge_het

ROWS = (Path(__file__).resolve().parents[1] / "data/slurm_het/sacct_het_P.txt").read_text()
ROWS = ROWS.splitlines()


NOW = datetime(2026, 11, 27, 1, 0, tzinfo=UTC).timestamp()


def t(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def read(parser: SacctParser, lines: list[str], now: float = NOW) -> list:  # type: ignore[type-arg]
    events = [e for line in lines for e in parser.parse(line, source="s", now=now)]
    return events + parser.caught_up(source="s", now=now)


def test_het_components_sum_their_gpus() -> None:
    events = read(SacctParser("me", tz=UTC), ROWS)
    got = [(e.kind.value, e.job_id, e.gpus, e.gpu_model, e.at) for e in events]
    assert got == [
        # 2 + 1 GPUs of its GPU components, 0 of the CPU one: 3, not the first row's 2.
        ("job_submitted", "700", 3, "a100", t("2026-11-26T23:50:00")),
        ("job_started", "700", 3, "a100", t("2026-11-26T23:51:00")),
        ("job_submitted", "710", 1, None, t("2026-11-26T23:55:00")),
        ("job_started", "710", 1, None, t("2026-11-26T23:56:00")),
    ]


def test_het_job_last_in_a_read_comes_out_when_the_read_ends() -> None:
    parser = SacctParser("me", tz=UTC)
    lines = ROWS[:5]  # header and the het job's rows only
    assert [e for line in lines for e in parser.parse(line, source="s", now=NOW)] == []
    (submitted, started) = parser.caught_up(source="s", now=NOW)
    assert (submitted.job_id, submitted.gpus, started.kind) == ("700", 3, EventKind.JOB_STARTED)


def test_het_job_ends_when_every_component_has() -> None:
    parser = SacctParser("me", tz=UTC)
    read(parser, ROWS)
    # Next poll: one component done, the others still running: nothing ends yet.
    second = [
        ROWS[0],
        ROWS[1].replace("|RUNNING|", "|COMPLETED|").replace("Unknown", "2026-11-27T00:05:00"),
        *ROWS[3:],
    ]
    assert read(parser, second) == []
    done = [
        r.replace("|RUNNING|", "|COMPLETED|").replace("Unknown", end)
        for r, end in zip(
            ROWS[1:5],
            ["2026-11-27T00:05:00", "", "2026-11-27T00:09:00", "2026-11-27T00:07:00"],
            strict=True,
        )
        if "." not in r.split("|")[1]
    ]
    (finished,) = read(parser, [ROWS[0], *done])
    assert finished.kind == EventKind.JOB_FINISHED and finished.job_id == "700"
    # All its GPUs, at the last component's end.
    assert finished.gpus == 3 and finished.at == t("2026-11-27T00:09:00")


def test_a_het_job_without_gpus_is_a_cpu_job_and_one_unknown_stays_unknown() -> None:
    parser = SacctParser("me", tz=UTC)
    rows = [ROWS[0], ROWS[4].replace("700+2", "800+0"), ROWS[4].replace("700+2", "800+1")]
    (submitted, _started) = read(parser, rows)
    assert submitted.job_id == "800" and submitted.gpus == 0
    # Components that say nothing of GPUs (no TRES column) leave the count unknown.
    no_tres = merge_het([read_row("900+0"), read_row("900+1")])
    assert no_tres.gpus is None and no_tres.job_id == "900"


def read_row(job_id: str):  # type: ignore[no-untyped-def]
    """One component row of a het job as the parser reads it (header without TRES)."""
    parser = SacctParser("me", tz=UTC)
    parser.parse("JobID|State|Submit", source="s", now=NOW)
    parser.parse(f"{job_id}|RUNNING|2026-11-26T23:50:00", source="s", now=NOW)
    return parser._het_rows[job_id.split("+")[1]]


def test_squeue_het_job_is_one_job_with_all_its_gpus() -> None:
    header = "JOBID|USER|STATE|TIME|NODES|TRES_PER_NODE|TRES_PER_JOB|SUBMIT_TIME|START_TIME|NAME"
    times = "2026-11-27T00:50:00|2026-11-27T00:51:00"
    het = [
        f"300+0|me|RUNNING|0:30|1|gres/gpu:a100:2|N/A|{times}|trainer",
        f"300+1|me|RUNNING|0:30|1|gres/gpu:1|N/A|{times}|trainer",
        f"300+2|me|RUNNING|0:30|1|N/A|N/A|{times}|loader",
    ]
    other = f"301|me|RUNNING|0:20|1|gres/gpu:1|N/A|{times}|eval"
    parser = SqueueParser("me", tz=UTC)
    assert read(parser, [header]) == []  # the baseline: nothing running yet
    got = read(parser, [header, *het, other])
    assert [(e.kind.value, e.job_id, e.gpus) for e in got] == [
        ("job_submitted", "300", 3),
        ("job_started", "300", 3),
        ("job_submitted", "301", 1),
        ("job_started", "301", 1),
    ]
    # The het job gone from the next snapshot: it ended, with all its GPUs.
    (ended,) = read(parser, [header, other, header])
    assert (ended.kind, ended.job_id, ended.gpus) == (EventKind.JOB_FINISHED, "300", 3)
