"""Every parser takes any input without raising (and without an internal error), and no
planted secret reaches an event."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sa_helpers import NOW, PLANTED, SEPARATORS, reprs

from smart_agent.parsers import PARSER_NAMES, make_parser
from smart_agent.parsers.base import BaseParser

HEADERS = {
    "sacct": "JobID|JobName|User|Partition|Submit|Start|End|State|AllocTRES|ReqTRES|Elapsed",
    "squeue": "JOBID|USER|ST|TIME|NODES|TRES_PER_NODE|SUBMIT_TIME|START_TIME",
    "jobs_csv": "job_id,user,submit_time_s,start_time_s,end_time_s,num_gpus,gpu_type,"
    "status,duration_s",
}
SETTINGS = settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
FIELD = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        [
            "RUNNING",
            "PENDING",
            "COMPLETED",
            "CD",
            "R",
            "PD",
            "gres/gpu=4",
            "gpu:a100:2",
            "2024-05-01T10:00:00",
            "1-02:03:04",
            "Unknown",
            "None",
            "1714550000",
            "-1",
            "1e309",
            "nan",
            "9" * 40,
        ]
    ),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["time", "ts", "msg", "event", "gpus", "job_id", "stage", "x"])
            | st.text(max_size=5),
            children,
            max_size=5,
        )
    ),
    max_leaves=12,
)


def parsers() -> list[BaseParser]:
    made = [make_parser(name, "f", user="me") for name in PARSER_NAMES]
    for parser in made:
        assert isinstance(parser, BaseParser)
        header = HEADERS.get(parser.name)
        if header:
            parser.parse(header, source="f", now=NOW)
    return made  # type: ignore[return-value]


def check(lines: list[str]) -> None:
    for parser in parsers():
        for line in lines:
            events = parser.parse(line, source="f", now=NOW)
            assert isinstance(events, list)
        parser.rewound(source="f", now=NOW)
        parser.caught_up(source="f", now=NOW)
        assert parser.stats.errors == 0, parser.name


@SETTINGS
@given(st.lists(st.text(max_size=200), max_size=8))
def test_any_text(lines: list[str]) -> None:
    check(lines)


@SETTINGS
@given(st.lists(st.binary(max_size=200), max_size=8))
def test_any_bytes_as_the_tailer_decodes_them(chunks: list[bytes]) -> None:
    check([c.decode("utf-8", "replace") for c in chunks])


@SETTINGS
@given(
    st.lists(st.lists(FIELD, min_size=1, max_size=12), max_size=6),
    st.sampled_from(["|", ",", "  "]),
)
def test_near_miss_records(rows: list[list[str]], sep: str) -> None:
    check([sep.join(row) for row in rows])


@SETTINGS
@given(st.lists(JSON, max_size=6))
def test_any_json(values: list) -> None:
    check([json.dumps(v) for v in values])


@SETTINGS
@given(st.lists(st.tuples(st.integers(-(10**12), 10**12), st.text(max_size=60)), max_size=6))
def test_shell_history_shapes(entries: list[tuple[int, str]]) -> None:
    check([f": {ts}:0;{cmd}" for ts, cmd in entries] + [f"#{ts}" for ts, _ in entries])


TEMPLATES = [
    ("plain", "2024-05-01 10:00:00 preprocessing done{s1}{secret}{s2}"),
    ("plain", "{secret}{s2}Saving model checkpoint to /tmp/x"),
    ("plain", "Training completed. Do not forget to share{s1}{secret}"),
    ("jsonl", '{{"msg": "training done{s1}{secret_json}", "job_id": "{secret_json}"}}'),
    ("jsonl", '{{"event": "epoch_end", "note": "{secret_json}"}}'),
    ("sacct", "1|job{s1}{secret_cell}|alice|gpu|2024-05-01T08:00:00|||PENDING||gres/gpu=1|0:00"),
    ("squeue", "7|alice|PD|0:00|1|gres:gpu:1|2024-05-01T10:00:00|N/A"),
    ("shell_history", "torchrun train.py{s1}{secret}"),
    ("shell_history", ": 1714590000:0;sbatch{s1}{secret} job.sh"),
    ("jobs_csv", "job-{secret_cell_csv},u,1,2,3,1,,completed,1"),
]


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    template=st.sampled_from(TEMPLATES),
    kind=st.sampled_from(sorted(PLANTED)),
    data=st.data(),
    s1=st.sampled_from(SEPARATORS),
    s2=st.sampled_from(SEPARATORS),
)
def test_planted_secrets_never_reach_an_event(template, kind, data, s1, s2) -> None:  # type: ignore[no-untyped-def]
    name, pattern = template
    text, secret = data.draw(PLANTED[kind])
    line = pattern.format(
        secret=text,
        secret_json=json.dumps(text)[1:-1],
        secret_cell=text.replace("|", " "),
        secret_cell_csv=text.replace(",", " ").replace('"', " "),
        s1=s1,
        s2=s2,
    )
    parser = make_parser(name, "f", user="me")
    events = []
    if name in HEADERS:
        parser.parse(HEADERS[name], source="f", now=NOW)
    if name == "squeue":  # a baseline snapshot, then the one with the job
        parser.parse(HEADERS[name], source="f", now=NOW)
    events += parser.parse(line, source="f", now=NOW)
    assert secret.replace("|", " ") not in reprs(events)
    assert json.dumps(secret)[1:-1] not in reprs(events)


@SETTINGS
@given(
    st.lists(st.lists(FIELD, min_size=1, max_size=14), max_size=6),
    st.sampled_from(["|", "  "]),
    st.booleans(),
)
def test_slurm_tables_without_header_or_in_fixed_width(
    rows: list[list[str]], sep: str, fixed: bool
) -> None:
    """No header (columns inferred from each row) or a fixed-width header with its dashes
    line: any rows, never an error, and every event's job id is a Slurm job id."""
    from smart_agent.parsers import SacctParser

    parser = SacctParser("me", baseline=True)
    lines = [sep.join(["1" if i == 0 else c for i, c in enumerate(row)]) for row in rows]
    if fixed:
        lines = ["JobID    JobName  State", "-------- -------- ----------", *lines]
    for line in lines:
        for event in parser.parse(line, source="f", now=NOW):
            assert event.job_id is not None and event.job_id.split("_")[0].isdigit()
    assert parser.stats.errors == 0
