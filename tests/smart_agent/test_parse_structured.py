"""JSON-lines logs and the jobs CSV in the trace schema."""

from __future__ import annotations

import csv
from datetime import UTC, datetime

from sa_helpers import DATA, NOW

from predictors.types import Cue, EventKind
from smart_agent.parsers import JobsCsvParser, JsonlParser

TRACE_SLICE = DATA.parent / "helios_venus_slice.csv"


def feed(parser, lines, now=NOW):  # type: ignore[no-untyped-def]
    return [e for line in lines for e in parser.parse(line, source="f", now=now)]


def test_json_lines() -> None:
    parser = JsonlParser("alice", tz=UTC)
    events = feed(parser, (DATA / "train.jsonl").read_text().splitlines())
    assert [(e.cue, e.gpus, e.job_id) for e in events] == [
        (Cue.PREPROCESSING_DONE, None, None),  # a rule on the message
        (Cue.EPOCH_END, 4, None),  # a structured cue field, GPUs from the record
        (Cue.CHECKPOINT_SAVED, None, None),
        (Cue.TRAINING_DONE, None, "r-17"),
    ]
    assert [e.at for e in events] == [
        datetime(2024, 5, 1, 10, tzinfo=UTC).timestamp(),
        1714557600.5,
        1714557600.123,  # milliseconds
        datetime(2024, 5, 1, 8, 5, tzinfo=UTC).timestamp(),  # +02:00
    ]
    assert events[0].excerpt == "preprocessing done"  # the message, not the whole record
    assert parser.stats.unknown == 2  # "not json at all" and a JSON list
    assert parser.stats.lines == 7 and parser.stats.errors == 0


def test_json_line_user_cue_and_message_fallback() -> None:
    from smart_agent.parsers import CueMatcher, CueRule

    parser = JsonlParser("alice", matcher=CueMatcher([CueRule("eval_done", "eval finished")]))
    events = feed(
        parser,
        [
            '{"event": "eval_done"}',
            '{"msg": "eval finished", "world_size": 8, "job_id": 77}',
            '{"event": "something_else", "msg": "hello"}',
            '{"msg": {"nested": "training done"}}',
            '{"ts": "not a time", "msg": "training done"}',
        ],
    )
    assert [(e.cue, e.gpus, e.job_id, e.at) for e in events] == [
        ("eval_done", None, None, NOW),
        ("eval_done", 8, "77", NOW),
        (Cue.TRAINING_DONE, None, None, NOW),
    ]
    assert parser.stats.unknown == 0


def test_deeply_nested_json_is_unknown_not_a_crash() -> None:
    parser = JsonlParser("alice")
    assert (
        parser.parse("{" + '"a":[' * 100_000 + "1" + "]" * 100_000 + "}", source="f", now=NOW) == []
    )
    assert parser.stats.errors == 0 and parser.stats.unknown == 1


def test_jobs_csv_trace_slice() -> None:
    parser = JobsCsvParser("me", t0=1_590_624_000.0)
    lines = TRACE_SLICE.read_text().splitlines()
    events = feed(parser, lines)
    rows = list(csv.DictReader(lines))
    assert parser.stats.unknown == 0 and parser.stats.errors == 0
    submitted = [e for e in events if e.kind is EventKind.JOB_SUBMITTED]
    finished = [e for e in events if e.kind is EventKind.JOB_FINISHED]
    assert len(submitted) == len(rows) == len(finished)  # Helios: duration, no start time
    first, row = submitted[0], rows[0]
    assert first.job_id == row["job_id"] and first.user == row["user"]
    assert first.gpus == int(row["num_gpus"]) and first.at == 1_590_624_000.0 + 120183
    assert finished[0].duration_s == float(row["duration_s"])
    assert finished[0].at == first.at + finished[0].duration_s


def test_jobs_csv_with_start_and_end() -> None:
    parser = JobsCsvParser("me")
    events = feed(
        parser,
        [
            "job_id,user,submit_time_s,start_time_s,end_time_s,num_gpus,gpu_type,status,duration_s",
            "a-1,bob,1714550000,1714550060,1714553660,4,a100,completed,",
            "a-2,bob,1714550100,,,2,,running,",
            "a-3,,1714550200,1714550300,,1,,running,",
            "bad,row",
            "a-4,bob,not-a-number,,,1,,,",
        ],
    )
    assert [(e.kind.value, e.job_id, e.at, e.duration_s, e.user, e.gpu_model) for e in events] == [
        ("job_submitted", "a-1", 1714550000, None, "bob", "a100"),
        ("job_started", "a-1", 1714550060, None, "bob", "a100"),
        ("job_finished", "a-1", 1714553660, 3600.0, "bob", "a100"),
        ("job_submitted", "a-2", 1714550100, None, "bob", None),
        ("job_submitted", "a-3", 1714550200, None, "me", None),  # no user: the agent's
        ("job_started", "a-3", 1714550300, None, "me", None),
    ]
    assert parser.stats.unknown == 2


def test_jobs_csv_rows_before_a_header_are_unknown() -> None:
    parser = JobsCsvParser("me")
    assert parser.parse("a-1,bob,1,2,3,4,,completed,1", source="f", now=NOW) == []
    assert parser.stats.unknown == 1
