"""Slurm: sacct --parsable2 history and squeue snapshots."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sa_helpers import DATA, NOW

from smart_agent.parsers import SacctParser, SqueueParser, make_parser
from smart_agent.parsers.slurm import gpus_in, phase_of
from smart_agent.parsers.times import parse_duration


def t(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def feed(parser, lines, now=NOW):  # type: ignore[no-untyped-def]
    return [e for line in lines for e in parser.parse(line, source="s", now=now)]


def brief(events):  # type: ignore[no-untyped-def]
    return [(e.kind.value, e.job_id) for e in events]


def test_sacct_history_appended_twice() -> None:
    parser = SacctParser("me", tz=UTC)
    lines = (DATA / "sacct.txt").read_text().splitlines()
    first_run = feed(parser, lines[:8])
    assert brief(first_run) == [
        ("job_submitted", "1001"),
        ("job_started", "1001"),
        ("job_finished", "1001"),
        ("job_submitted", "1002"),
        ("job_started", "1002"),
        ("job_submitted", "1003"),
        ("job_submitted", "1004"),
        ("job_started", "1004"),
        ("job_finished", "1004"),
        ("job_submitted", "1005"),
        ("job_finished", "1005"),  # cancelled while pending
        ("job_submitted", "1006_3"),
        ("job_started", "1006_3"),
        ("job_finished", "1006_3"),
    ]
    by = {(e.kind.value, e.job_id): e for e in first_run}
    assert by["job_submitted", "1002"].at == t("2024-05-01 08:31:00")
    assert by["job_started", "1002"].at == t("2024-05-01 08:35:00")
    assert (by["job_started", "1002"].gpus, by["job_started", "1002"].gpu_model) == (4, "a100")
    assert (
        by["job_finished", "1004"].duration_s == 6 * 3600 and by["job_finished", "1004"].gpus == 16
    )
    assert by["job_finished", "1005"].duration_s == 0.0
    assert by["job_submitted", "1003"].gpus == 1  # ReqTRES when nothing is allocated yet
    assert all(e.user == "alice" for e in first_run)
    assert by["job_started", "1002"].excerpt == "name=train partition=gpu state=RUNNING"

    second_run = feed(parser, lines[8:])
    assert brief(second_run) == [("job_finished", "1002"), ("job_started", "1003")]
    assert second_run[0].duration_s == 7200 and second_run[0].at == t("2024-05-01 10:35:00")
    assert parser.stats.unknown == 0 and parser.stats.errors == 0


def test_sacct_without_header_infers_columns_or_takes_given_fields() -> None:
    row = "77|alice|2024-05-01T08:00:00|RUNNING|gres/gpu=2"
    parser = SacctParser("me")
    inferred = feed(parser, [row])
    # Inferred from the shape, with a warning: the job, its state, time and GPUs, but not
    # whose job it is (that takes the configured fields).
    assert brief(inferred) == [("job_submitted", "77"), ("job_started", "77")]
    assert inferred[0].at == t("2024-05-01 08:00:00") and inferred[0].gpus == 2
    assert parser.layout_name == "inferred" and "sacct_fields" in parser.notes[0]
    assert parser.parse("not a job|x", source="s", now=NOW) == []
    assert parser.stats.unknown == 1
    parser = SacctParser("me", fields=["JobID", "User", "Submit", "State", "AllocTRES"])
    assert brief(feed(parser, [row])) == [("job_submitted", "77"), ("job_started", "77")]


def test_sacct_odd_rows() -> None:
    parser = SacctParser("me")
    events = feed(
        parser,
        [
            "JobIDRaw|State|ReqGRES|ElapsedRaw|Start|End",
            "88|WEIRD_STATE|gpu:2|10||",
            "|RUNNING|gpu:2|10||",
            "89|CANCELLED+|gpu:v100:2|600|2024-05-01T08:00:00|2024-05-01T08:10:00",
            "89.extern|COMPLETED||600||",
            "short",
        ],
    )
    # No Submit column: a job first seen finished is no arrival, and the read time is not
    # its submit time; its start and end are the times its row states.
    assert brief(events) == [("job_started", "89"), ("job_finished", "89")]
    assert events[-1].duration_s == 600 and events[-1].gpus == 2 and events[-1].gpu_model == "v100"
    assert parser.stats.unknown == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("billing=8,cpu=8,gres/gpu=4,mem=64G,node=1", (4, None)),
        ("cpu=8,gres/gpu:a100=4,gres/gpu=4", (4, "a100")),
        ("gres/gpu:a100=2,gres/gpu:v100=1", (3, "a100")),
        ("gres/gpu:4", (4, None)),
        ("gres:gpu:h100:8(IDX:0-7)", (8, "h100")),
        ("gpu:2,gpu:1", (3, None)),
        ("cpu=8,mem=1G", (None, None)),
        ("", (None, None)),
        ("gres/gpu=0", (None, None)),
    ],
)
def test_gpus_in_tres_and_gres(text: str, expected: tuple) -> None:
    assert gpus_in(text) == expected


def test_states_and_durations() -> None:
    assert [phase_of(s) for s in ("PD", "RUNNING", "CG", "CANCELLED by 1000", "OOM", "x")] == [
        0,
        1,
        1,
        2,
        2,
        None,
    ]
    assert parse_duration("1-02:03:04") == 93784
    assert parse_duration("02:03:04") == 7384
    assert parse_duration("3:04") == 184
    assert parse_duration("nonsense") is None and parse_duration("9" * 5000 + ":00") is None


def test_squeue_default_layout() -> None:
    parser = SqueueParser("me")
    events = feed(parser, (DATA / "squeue.txt").read_text().splitlines())
    # The first snapshot is a baseline: 2001 running and 2002 pending give no events.
    assert brief(events) == [
        ("job_started", "2002"),  # PD -> R
        ("job_submitted", "2003"),  # new, pending
        ("job_finished", "2001"),  # gone when the third snapshot began
        ("job_started", "2003"),
        ("job_finished", "2002"),  # gone in the fourth (empty) snapshot
    ]
    started = events[0]
    assert started.at == NOW - 10  # from its TIME column
    assert events[1].user == "bob"
    assert events[2].duration_s == 3723 and events[2].user == "alice"
    assert parser.stats.unknown == 0 and parser.stats.errors == 0


def test_squeue_pipe_layout_with_times_and_gpus() -> None:
    parser = make_parser("auto", "squeue_pipe.txt", user="me", tz=UTC)
    assert isinstance(parser, SqueueParser)
    events = feed(parser, (DATA / "squeue_pipe.txt").read_text().splitlines())
    assert brief(events) == [("job_submitted", "3002"), ("job_started", "3002")]
    assert events[0].at == t("2024-05-01 10:09:00") and events[0].gpus == 16  # 8 x 2 nodes
    assert events[1].at == t("2024-05-01 10:10:00")


def test_squeue_a_job_shown_completed_is_finished_once() -> None:
    parser = SqueueParser("me")
    header = "JOBID|USER|ST|TIME"
    events = feed(
        parser,
        [header, header, "5|me|R|1:00", header, "5|me|CD|2:00", header, "5|me|CD|2:00", header],
    )
    assert brief(events) == [("job_submitted", "5"), ("job_started", "5"), ("job_finished", "5")]
    assert events[-1].duration_s == 120


def test_squeue_rows_before_a_header_are_unknown() -> None:
    parser = SqueueParser("me")
    assert feed(parser, ["  2001 gpu train alice R 1:00 1 n1", "JOBID ST", "x y z"]) == []
    assert parser.stats.unknown == 2


@pytest.mark.parametrize(
    ("header", "first", "second"),
    [
        ("JOBID|JOBID|ST", ["1_[1-3]|1|PD", "1_0|4|R"], ["1_[2-3]|1|PD", "1_1|5|R"]),  # %i|%A
        ("ARRAY_JOB_ID|ARRAY_TASK_ID|ST", ["1|1-3|PD", "1|0|R"], ["1|2-3|PD", "1|1|R"]),  # %F|%K
    ],
)
def test_squeue_array_tasks_named_as_sacct_names_them(
    header: str, first: list[str], second: list[str]
) -> None:
    """Of two JOBID columns the spelt one, or the array job and task columns: a task is
    `1_1` (not its raw id 5), and the pending row `1_[1-3]` ends as no job."""
    parser = SqueueParser("me")
    events = feed(parser, [header, *first, header, *second, header, header])
    assert brief(events) == [
        ("job_submitted", "1_1"),
        ("job_started", "1_1"),
        ("job_finished", "1_0"),
        ("job_finished", "1_1"),
    ]
