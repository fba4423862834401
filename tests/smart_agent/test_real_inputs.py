"""Every real sample (tests/data/real-inputs/) read through the agent's own reading path (the
watcher's tailer and the parser the agent chooses) gives the events written out by hand in
real_inputs_expected.py; appended and rewritten job tables followed live are diffed."""

from __future__ import annotations

import shutil
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from real_inputs_expected import EXPECTED, E

from predictors.types import Event, EventKind
from smart_agent.inspection import Inspection, inspect_file
from smart_agent.parsers import make_parser
from smart_agent.watch.tailer import CAUGHT_UP, REWOUND, FileTailer

ROOT = Path(__file__).resolve().parents[1] / "data" / "real-inputs"
NOW = datetime(2026, 11, 27, tzinfo=UTC).timestamp()
SAMPLES = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file())
SAMPLES = [s for s in SAMPLES if s != "SOURCES.md"]


def brief(line: int, event: Event) -> E:
    at = "READ" if event.at == NOW else datetime.fromtimestamp(event.at, UTC).isoformat()[:19]
    is_cue = event.kind == EventKind.CUE
    return E(
        line,
        event.cue if is_cue and event.cue else event.kind.value,
        event.job_id,
        event.gpus,
        event.gpu_model,
        at,
        event.user,
        None if is_cue else event.cue,
    )


def read(name: str) -> Inspection:
    return inspect_file(ROOT / name, user="alice", now=NOW, tz=UTC)


def test_every_sample_has_its_expectation() -> None:
    assert len(SAMPLES) == 45
    assert sorted(EXPECTED) == SAMPLES


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_is_read_as_expected(name: str) -> None:
    expected = EXPECTED[name]
    got = read(name)
    assert (got.kind, got.layout, got.recognized) == (
        expected.kind,
        expected.layout,
        expected.recognized,
    )
    assert [brief(line, e) for line, e in got.events] == expected.events
    assert {j: (r["state"], r["gpus"]) for j, r in got.jobs.items()} == expected.jobs
    assert len(got.notes) == expected.notes
    assert got.unknown <= got.lines


def test_the_table_of_the_issue() -> None:
    """Per input family: how many samples are recognised, how many give their events right."""
    families = Counter(name.split("/")[0] for name in SAMPLES)
    recognized: Counter[str] = Counter()
    for name in SAMPLES:
        got = read(name)
        recognized[name.split("/")[0]] += got.recognized
    # Slurm tables in every form, and every framework log that says anything, are read.
    for family in ("sacct", "squeue", "torchrun", "deepspeed", "hf_trainer", "lightning"):
        assert recognized[family] == families[family], family
    assert recognized["slurm_out"] == families["slurm_out"] - 4  # `task 0 of 3 on GPU 3`


def test_time_limit_and_other_slurm_endings_are_not_normal_ends() -> None:
    cues = [
        e.cue for name in SAMPLES if name.startswith("slurm_out/") for _, e in read(name).events
    ]
    assert cues.count("job_timeout") == 3 and "training_failed" in cues
    ended = [
        e.job_id for _, e in read("slurm_out/O01_zetta_timelimit.out").events
    ]  # the job line and its step's line: one end
    assert ended == ["494583"]


def test_a_last_line_without_newline_is_read(tmp_path: Path) -> None:
    crash = tmp_path / "crash.log"
    crash.write_bytes(
        b"step 10 loss 2.1\ntorch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate"
    )
    got = inspect_file(crash, user="alice", now=NOW)
    assert [brief(line, e).name for line, e in got.events] == ["training_failed"]


def test_hf_epoch_zero_is_not_an_epoch_end() -> None:
    names = [brief(line, e).name for line, e in read("hf_trainer/H04_unsloth_sft.log").events]
    assert "epoch_end" not in names


def _follow(path: Path, parser, lines: list[str], cut: int) -> list[Event]:  # type: ignore[no-untyped-def]
    """Lines[:cut] are there when the agent starts (read whole, as a baseline); the rest are
    appended afterwards, a poll after each line, as a writer does."""
    events: list[Event] = []
    path.write_text("".join(lines[:cut]))

    def on_line(_: Path, text: str) -> None:
        events.extend(parser.parse(text, source="f", now=NOW))

    def on_notice(_: Path, what: str) -> None:
        if what == CAUGHT_UP:
            events.extend(parser.caught_up(source="f", now=NOW))
        elif what == REWOUND:
            parser.rewound(source="f", now=NOW)

    tailer = FileTailer(path, on_line, from_end=False, on_notice=on_notice)
    tailer.poll()
    with open(path, "a") as handle:
        for line in lines[cut:]:
            handle.write(line)
            handle.flush()
            tailer.poll()
    tailer.close()
    return events


@pytest.mark.parametrize(
    "name",
    [
        "squeue/G01_local_squeue_default_appended.txt",
        "squeue/G02_local_squeue_o_b_appended.txt",
        "squeue/G03_local_squeue_O_pipe_appended.txt",
    ],
)
def test_squeue_snapshots_followed_live(tmp_path: Path, name: str) -> None:
    lines = (ROOT / name).read_text().splitlines(keepends=True)
    path = tmp_path / "queue.txt"  # not named squeue*: the content decides
    parser = make_parser("auto", path, user="alice", tz=UTC, baseline=True)
    events = _follow(path, parser, lines, cut=5)  # two snapshots before the agent started
    finished = Counter(e.job_id for e in events if e.kind == EventKind.JOB_FINISHED)
    # Every job that ran ends once; the pending array `3_[0-3]` never "finishes".
    assert all(count == 1 for count in finished.values())
    assert not any("[" in (e.job_id or "") for e in events)
    assert {"4", "8", "9", "10", "11"} <= set(finished)
    by_job = {e.job_id: e for e in events if e.kind == EventKind.JOB_FINISHED}
    if "TRES_PER_NODE" in lines[0]:
        assert by_job["8"].gpus == 8 and by_job["4"].gpus == 2 and by_job["4"].gpu_model == "a100"
    # Jobs 1 and 2 were pending in the baseline: their submission is no arrival at the
    # read time (only at a time the snapshot states, as history); their start is seen live.
    submitted = [e for e in events if e.kind == EventKind.JOB_SUBMITTED and e.job_id in ("1", "2")]
    assert all(e.at != NOW for e in submitted)
    assert bool(submitted) == ("SUBMIT_TIME" in lines[0])
    started = {e.job_id for e in events if e.kind == EventKind.JOB_STARTED}
    assert {"1", "2"} <= started


def test_sacct_polled_and_appended_followed_live(tmp_path: Path) -> None:
    lines = (ROOT / "sacct/G07_local_sacct_P_polled_appended.txt").read_text()
    lines = lines.splitlines(keepends=True)
    parser = make_parser("auto", tmp_path / "jobs.txt", user="alice", tz=UTC, baseline=True)
    events = _follow(tmp_path / "jobs.txt", parser, lines, cut=12)
    finished = Counter(e.job_id for e in events if e.kind == EventKind.JOB_FINISHED)
    assert set(finished) == {"1", "2", "3_0", "3_1", "3_2", "3_3", "4", "8", "9", "10", "11"}
    assert all(count == 1 for count in finished.values())
    # Each time is the one the rows state, never the read time.
    assert all(e.at != NOW for e in events)


def test_sacct_rewritten_in_place_is_diffed(tmp_path: Path) -> None:
    """`sacct -P > jobs.txt` from cron: the file is rewritten whole, and grows. The first
    read is a baseline (the jobs that finished before are no arrivals); a later rewrite
    gives only what changed, at the read time since these columns state no times."""
    source = (ROOT / "sacct/G02_local_sacct_P_default_fields.txt").read_text().splitlines()
    header, rows = source[0], source[1:]
    path = tmp_path / "jobs.txt"
    first = [header, *rows[:4], "12|train|gpu|research|1|RUNNING|0:0"]
    path.write_text("\n".join(first) + "\n")
    events: list[Event] = []
    parser = make_parser("auto", path, user="alice", baseline=True)

    def on_notice(_: Path, what: str) -> None:
        if what == CAUGHT_UP:
            parser.caught_up(source="f", now=NOW)

    tailer = FileTailer(
        path,
        lambda _, text: events.extend(parser.parse(text, source="f", now=NOW)),
        from_end=False,
        on_notice=on_notice,
    )
    tailer.poll()
    assert events == []  # a baseline: no burst of arrivals stamped with the read time
    second = [header, *rows[:4], "12|train|gpu|research|1|COMPLETED|0:0"]
    second += ["13|eval|gpu|research|1|PENDING|0:0"]
    shutil.copy(path, tmp_path / "before")
    path.write_text("\n".join(second) + "\n")  # in place, same head, longer
    tailer.poll()
    tailer.close()
    assert [(e.kind.value, e.job_id, e.at) for e in events] == [
        ("job_finished", "12", NOW),
        ("job_submitted", "13", NOW),
    ]
    assert tailer.stats.truncations == 1
