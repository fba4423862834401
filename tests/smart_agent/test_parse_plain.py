"""Plain-text logs: the built-in cues on real-looking framework output, user rules, times."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sa_helpers import DATA, NOW

from predictors.types import Cue, EventKind
from smart_agent.parsers import CueMatcher, CueRule, PlainParser
from smart_agent.parsers.cues import LAST_EPOCH, TRAINING_FAILED, TRAINING_STARTED


def run(name: str, parser: PlainParser | None = None) -> tuple[PlainParser, list]:
    parser = parser or PlainParser("alice", tz=UTC)
    events = []
    for line in (DATA / name).read_text().splitlines():
        events += parser.parse(line, source=name, now=NOW)
    return parser, events


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def cues(events: list) -> list[tuple[str | None, int | None]]:
    return [(e.cue, e.gpus) for e in events]


def test_pytorch_lightning() -> None:
    parser, events = run("lightning.log")
    assert cues(events) == [
        (TRAINING_STARTED, 4),  # CUDA_VISIBLE_DEVICES: [0,1,2,3]
        (Cue.EPOCH_END, None),  # the bar at 100%, not at 50%
        (Cue.CHECKPOINT_SAVED, None),
        (Cue.EPOCH_END, None),
        (Cue.TRAINING_DONE, None),
    ]
    assert all(e.kind is EventKind.CUE and e.user == "alice" for e in events)
    assert all(e.at == NOW and e.source == "lightning.log" for e in events)  # no times in it
    assert "/home/[user]/runs" in events[2].excerpt and "alice" not in events[2].excerpt
    assert parser.stats.lines == 23 and parser.stats.events == 5
    assert parser.stats.unknown == 16 and parser.stats.errors == 0  # blank lines not unknown


def test_hugging_face_trainer() -> None:
    _, events = run("hf_trainer.log")
    assert [e.cue for e in events] == [
        TRAINING_STARTED,
        Cue.EPOCH_END,
        Cue.CHECKPOINT_SAVED,
        Cue.TRAINING_DONE,
        Cue.TRAINING_DONE,
    ]
    assert events[0].at == at("2024-05-01 10:00:00.123")  # comma decimals in the time
    assert events[2].at == at("2024-05-01 10:20:00.456")


def test_deepspeed() -> None:
    _, events = run("deepspeed.log")
    assert cues(events) == [
        (TRAINING_STARTED, 4),
        (Cue.CHECKPOINT_SAVED, None),
        (Cue.CHECKPOINT_SAVED, None),
    ]
    assert events[0].at == at("2024-05-01 10:00:02")


def test_torchrun() -> None:
    _, events = run("torchrun.log")
    assert cues(events) == [(TRAINING_STARTED, 8), (Cue.TRAINING_DONE, None)]


def test_generic_pipeline_lines() -> None:
    _, events = run("generic.log")
    assert [e.cue for e in events] == [
        Cue.PREPROCESSING_DONE,
        Cue.PREPROCESSING_DONE,
        Cue.EPOCH_END,
        LAST_EPOCH,
        Cue.TRAINING_DONE,
        Cue.CHECKPOINT_SAVED,
        Cue.JOB_SUBMITTED,
    ]
    assert events[0].at == at("2024-05-01 09:10:00")
    submitted = events[-1]
    assert submitted.kind is EventKind.JOB_SUBMITTED and submitted.job_id == "123456"


@pytest.mark.parametrize(
    ("line", "cue"),
    [
        ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", TRAINING_FAILED),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", TRAINING_FAILED),
        ("Data preparation complete", Cue.PREPROCESSING_DONE),
        ("finished preprocessing 12 files", Cue.PREPROCESSING_DONE),
        ("end of epoch 4 | valid loss 2.1", Cue.EPOCH_END),
        ("epoch 7 finished, acc 0.9", Cue.EPOCH_END),
        ("Epoch [2/10] loss 0.3", Cue.EPOCH_END),
        ("epoch 10 of 10", LAST_EPOCH),
        ("Saved checkpoint at step 400", Cue.CHECKPOINT_SAVED),
        ("training is complete", Cue.TRAINING_DONE),
        ("starting training with 3 workers", TRAINING_STARTED),
    ],
)
def test_common_phrasings(line: str, cue: str) -> None:
    events = PlainParser("alice").parse(line, source="x", now=NOW)
    assert [e.cue for e in events] == [cue]


@pytest.mark.parametrize("line", ["step 10 loss 0.5", "epoch_time=3.2", "", "   ", "the pre"])
def test_other_lines_make_no_event(line: str) -> None:
    assert PlainParser("alice").parse(line, source="x", now=NOW) == []


def test_user_rules_come_first_with_named_groups() -> None:
    rules = [
        CueRule("eval_done", r"evaluation finished", strong=True),
        CueRule("launch", r"launching on (?P<gpus>\d+) x (?P<gpu_model>\w+)"),
        CueRule("queued", r"queued as (?P<job_id>[\w-]+)", kind=EventKind.JOB_SUBMITTED),
        CueRule("stage_done", r"Stage (?P<devices>[\d,]+) DONE", case_sensitive=True),
    ]
    matcher = CueMatcher(rules)
    parser = PlainParser("alice", matcher=matcher)
    lines = [
        "evaluation finished: training done",
        "launching on 8 x h100",
        "queued as run-42",
        "Stage 1,2 DONE",
        "stage 1,2 done",
    ]
    events = [e for line in lines for e in parser.parse(line, source="x", now=NOW)]
    assert [(e.kind, e.cue, e.gpus, e.gpu_model, e.job_id) for e in events] == [
        (EventKind.CUE, "eval_done", None, None, None),  # the user rule wins over defaults
        (EventKind.CUE, "launch", 8, "h100", None),
        (EventKind.JOB_SUBMITTED, "queued", None, None, "run-42"),
        (EventKind.CUE, "stage_done", 2, None, None),
    ]
    assert matcher.strong >= {"eval_done", Cue.TRAINING_DONE}


def test_defaults_can_be_switched_off() -> None:
    parser = PlainParser("alice", matcher=CueMatcher([], defaults=False))
    assert parser.parse("training done", source="x", now=NOW) == []
    assert parser.stats.unknown == 1


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("2024-05-01T10:00:00Z training done", "2024-05-01 10:00:00"),
        ("2024-05-01T12:00:00+02:00 training done", "2024-05-01 10:00:00"),
        ("[2024-05-01 10:00:00.250] training done", "2024-05-01 10:00:00.250"),
        ("I0501 10:00:00 training done", None),  # not a date we read: the read time
        ("1999-01-01 00:00:00 training done", None),  # not plausible
        ("2024-05-03 00:00:00 training done", None),  # more than a day ahead of the clock
        ("2024-13-45 99:00:00 training done", None),
    ],
)
def test_event_time_from_the_line_else_the_clock(line: str, expected: str | None) -> None:
    (event,) = PlainParser("alice", tz=UTC).parse(line, source="x", now=NOW)
    assert event.at == (NOW if expected is None else at(expected))


def test_a_time_without_zone_is_in_the_configured_zone() -> None:
    from zoneinfo import ZoneInfo

    parser = PlainParser("alice", tz=ZoneInfo("Europe/Paris"))
    (event,) = parser.parse("2024-05-01 12:00:00 training done", source="x", now=NOW)
    assert event.at == at("2024-05-01 10:00:00")
