"""Sources: the config (errors that name the key and what is allowed), and everything from
real files and a process table to redacted events, with the counters."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sa_helpers import PEM, PEM_BODY

from predictors.types import Cue, Event, EventKind
from smart_agent.procwatch import ProcInfo
from smart_agent.sources import Sources, SourcesConfig, login_name, source_label
from smart_agent.yamlconf import ConfigError, load_model
from tests.support.procs import wait_for

EXAMPLE = """\
user: alice
watch:
  - path: ~/runs/logs
    include: ["*.log", "*.jsonl"]
    exclude: ["*.tmp"]
    parser: auto
    backfill: false
  - path: ~/.bash_history
    parser: shell_history
cues:
  - name: eval_done
    pattern: "evaluation finished"
    strong: true
processes:
  patterns: ["torchrun", "python .*train\\\\.py", "sbatch"]
  interval_s: 2
polling: auto
redact:
  patterns: ["ACME-[0-9]{6}"]
"""


def test_the_documented_example_loads(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(EXAMPLE)
    config = load_model(SourcesConfig, path)
    assert config.user == "alice" and config.watch[1].parser == "shell_history"
    assert config.processes.patterns[1] == r"python .*train\.py"
    assert config.cues[0].rule().strong and config.watch[0].exclude == ["*.tmp"]


def test_defaults() -> None:
    config = SourcesConfig()
    assert config.user == login_name() and config.watch == [] and config.polling == "auto"
    assert config.tzinfo() is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "watch:\n  - path: /x\n    parsr: plain\n",
            "key 'watch.0.parsr': unknown key; allowed keys here: backfill, exclude, include, "
            "parser, path, polling, recursive, sacct_fields, t0",
        ),
        (
            "watch:\n  - path: /x\n    parser: xml\n",
            "key 'watch.0.parser': Input should be 'auto', 'plain', 'jsonl', 'sacct', 'squeue', "
            "'shell_history' or 'jobs_csv'",
        ),
        ("polling: sometimes\n", "Input should be 'auto', 'always' or 'never'"),
        (
            "cues:\n  - name: x\n    pattern: '(unclosed'\n",
            "not a valid regular expression: missing )",
        ),
        ("cues:\n  - name: Bad Name\n    pattern: x\n", "key 'cues.0.name'"),
        ("processes:\n  patterns: ['[']\n", "key 'processes.patterns': "),
        ("redact:\n  patterns: ['*oops']\n", "not a valid regular expression"),
        ("timezone: Mars/Olympus\n", "unknown time zone 'Mars/Olympus'"),
        ("processes:\n  interval_s: 0\n", "key 'processes.interval_s'"),
        ("wach: []\n", "allowed keys here: cues, default_cues, max_files"),
    ],
)
def test_config_errors_name_the_key_and_what_is_allowed(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_model(SourcesConfig, path)
    assert expected in str(info.value) and str(path) in str(info.value)


def test_source_label_hides_the_home_folder(tmp_path: Path) -> None:
    assert source_label(tmp_path / "runs" / "a.log", home=tmp_path) == "~/runs/a.log"
    assert source_label(Path("/var/log/x.log"), home=tmp_path) == "/var/log/x.log"


class Collector:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        with self.lock:
            self.events.append(event)

    def cues(self) -> list[str | None]:
        with self.lock:
            return [e.cue for e in self.events]

    def all(self) -> str:
        with self.lock:
            return "\n".join(repr(e) for e in self.events)


def append(path: Path, text: str) -> None:
    with open(path, "a") as handle:
        handle.write(text)


SECRETS = [
    "sk-proj-Zq8abcdefghijklmnopqrstuvwxyz0123",
    "hunter2hunter2",
    "ACME-123456",
    "bob.secret@example.org",
    "10.20.30.40",
    "ghp_Zq8abcdefghijklmnopqrstuvwxyz012345",
]


def test_end_to_end_from_files_and_processes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    logs = home / "runs" / "logs"
    logs.mkdir(parents=True)
    train = logs / "train.log"
    train.write_text("old: training done\n")  # before the start: not reported
    history = home / ".bash_history"
    history.write_text("sbatch old.sh\nls\n")
    sacct = home / "sacct.txt"
    sacct.write_text("")
    procs: dict[int, ProcInfo] = {}
    config = SourcesConfig.model_validate(
        {
            "user": "alice",
            "watch": [
                {"path": "~/runs/logs", "include": ["*.log", "*.jsonl"], "exclude": ["*.tmp"]},
                {"path": "~/.bash_history", "parser": "shell_history"},
                {"path": "~/sacct.txt", "parser": "sacct"},
            ],
            "cues": [{"name": "eval_done", "pattern": "evaluation finished", "strong": True}],
            "processes": {"patterns": ["torchrun"], "interval_s": 0.2},
            "redact": {"patterns": ["ACME-[0-9]{6}"]},
            "poll_s": 0.2,
            "max_line_bytes": 4096,
        }
    )
    got = Collector()
    sources = Sources(config, got, process_source=lambda: list(procs.values()), home=home)
    assert "eval_done" in sources.strong_cues and Cue.TRAINING_DONE in sources.strong_cues
    sources.start()
    try:
        append(train, f"preprocessing done token={SECRETS[0]}\n")
        append(train, f"evaluation finished for {SECRETS[2]} by {SECRETS[3]}\n")
        append(train, "config dump:\n" + PEM + "\nEpoch 2/10 loss 0.1\n")
        append(train, "x" * 10_000 + f" password={SECRETS[1]}\n")
        append(train, f"checkpoint saved on {SECRETS[4]}\n")
        (logs / "metrics.jsonl").write_text(
            '{"msg": "training done", "gpus": 8, "note": "' + SECRETS[5] + '"}\n'
        )
        (logs / "skip.tmp").write_text("training done\n")
        append(
            sacct,
            "JobID|User|Submit|State|AllocTRES\n9|alice|2024-05-01T08:00:00|PENDING|gres/gpu=2\n",
        )
        append(history, f"HF_TOKEN={SECRETS[5]} torchrun --nproc_per_node=2 train.py\n")
        procs[77] = ProcInfo(77, 1, 1714600000.0, ("torchrun", "--password", SECRETS[1]), 1)
        wait_for(lambda: len(got.events) >= 8, timeout=15, what="eight events")
        history.write_text(
            "sbatch old.sh\nls\n"  # bash rewrote its history: no replay
            f"HF_TOKEN={SECRETS[5]} torchrun --nproc_per_node=2 train.py\n"
            "sbatch new.sh\n"
        )
        wait_for(lambda: len(got.events) >= 9, timeout=15, what="the new history line")
    finally:
        sources.stop()

    by_source: dict[str | None, list[Event]] = {}
    for event in got.events:
        by_source.setdefault(event.source, []).append(event)
    assert [e.cue for e in by_source["~/runs/logs/train.log"]] == [
        Cue.PREPROCESSING_DONE,
        "eval_done",
        Cue.EPOCH_END,
        Cue.CHECKPOINT_SAVED,
    ]
    (metrics,) = by_source["~/runs/logs/metrics.jsonl"]
    assert metrics.cue == Cue.TRAINING_DONE and metrics.gpus == 8
    assert [(e.kind, e.job_id, e.gpus) for e in by_source["~/sacct.txt"]] == [
        (EventKind.JOB_SUBMITTED, "9", 2),
    ]
    assert [e.excerpt for e in by_source["~/.bash_history"]] == [
        "HF_TOKEN=[REDACTED:github] torchrun --nproc_per_node=2 train.py",
        "sbatch new.sh",
    ]
    (proc,) = by_source["process"]
    assert proc.kind is EventKind.JOB_STARTED and proc.job_id == "pid77@1714600000"

    text = got.all()
    for secret in SECRETS:
        assert secret not in text
    assert not any(part in text for part in PEM_BODY)
    assert "old.sh" not in text and "skip.tmp" not in text and "old: training" not in text
    assert all(e.user == "alice" for e in got.events)

    stats = sources.stats()
    assert stats["events"] == len(got.events) == 9
    assert stats["lines_cut"] == 1 and stats["files"] >= 4 and stats["observer"] != "none"
    assert stats["unknown_lines"] >= 2  # "config dump:" and the cut line
    assert stats["parser_errors"] == 0 and stats["callback_errors"] == 0
    assert stats["redactions"]["custom"] >= 1 and stats["processes"]["tracked"] == 1
    assert stats["sources"]["~/runs/logs/train.log"]["parser"] == "auto"


def test_a_failing_callback_is_counted_not_fatal(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("")
    config = SourcesConfig(user="alice", watch=[{"path": str(log)}], poll_s=0.1)

    def broken(event: Event) -> None:
        raise RuntimeError("consumer bug")

    sources = Sources(config, broken)
    sources.start()
    try:
        append(log, "training done\ntraining done\n")
        wait_for(
            lambda: sources.stats()["callback_errors"] == 2,
            timeout=10,
            what="two failed deliveries",
        )
    finally:
        sources.stop()


def test_debouncer_knows_user_strong_cues() -> None:
    config = SourcesConfig(cues=[{"name": "eval_done", "pattern": "x", "strong": True}])
    debouncer = Sources(config, lambda e: None).debouncer(window_s=5)
    assert debouncer.is_strong(Event(EventKind.CUE, 0, "a", cue="eval_done"))
    assert debouncer.window_s == 5
