"""Shell history: launch commands become job_submitted cues, once each, through rewrites."""

from __future__ import annotations

import pytest
from sa_helpers import NOW

from predictors.types import Cue, EventKind
from smart_agent.parsers import ShellHistoryParser
from smart_agent.parsers.shell import launch_gpus


def feed(parser, lines, now=NOW):  # type: ignore[no-untyped-def]
    return [e for line in lines for e in parser.parse(line, source="h", now=now)]


@pytest.mark.parametrize(
    "command",
    [
        "sbatch train.sh",
        "/usr/bin/sbatch --gres=gpu:4 job.sh",
        "srun -N 2 --gpus-per-node=8 python train.py",
        "salloc -G 2",
        "torchrun --nproc_per_node=8 train.py",
        "python -m torch.distributed.run --nproc-per-node 4 train.py",
        "python3.11 -u scripts/train_lm.py --epochs 3",
        "accelerate launch --num_processes 4 finetune.py",
        "deepspeed --num_gpus=2 train.py --deepspeed ds.json",
        "CUDA_VISIBLE_DEVICES=0,1 nohup python train.py > out.log 2>&1 &",
        "cd ~/proj && uv run torchrun train.py",
        "conda run -n ml python train.py",
    ],
)
def test_launch_commands(command: str) -> None:
    assert ShellHistoryParser("me").is_launch(command)


@pytest.mark.parametrize(
    "command",
    [
        "man sbatch",
        "sbatch --help",
        "which torchrun",
        "squeue -u me",
        "vim train.py",
        "python eval.py",
        "git commit -m 'torchrun fix'",
        "echo sbatch",
        "ls",
        "",
        "torchrun --version",
    ],
)
def test_other_commands(command: str) -> None:
    assert not ShellHistoryParser("me").is_launch(command)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("sbatch --gres=gpu:4 job.sh", (4, None)),
        ("sbatch --gres=gpu:a100:2 -N 2 job.sh", (4, "a100")),
        ("srun --gpus=h100:8 python train.py", (8, "h100")),
        ("srun -G 2 x", (2, None)),
        ("torchrun --nnodes 2 --nproc_per_node=8 train.py", (16, None)),
        ("accelerate launch --num_processes=4 x.py", (4, None)),
        ("CUDA_VISIBLE_DEVICES=0,3 python train.py", (2, None)),
        ("sbatch job.sh", (None, None)),
    ],
)
def test_gpus_asked_for(command: str, expected: tuple) -> None:
    assert launch_gpus(command) == expected


def test_bash_zsh_and_fish_formats() -> None:
    parser = ShellHistoryParser("me")
    events = feed(
        parser,
        [
            "ls -la",
            "sbatch --gres=gpu:2 a.sh",  # plain bash: no time, the read time
            "#1714590000",
            "torchrun --nproc_per_node=4 train.py",  # bash with HISTTIMEFORMAT
            ": 1714590100:0;sbatch b.sh",  # zsh extended
            ": 1714590200:3;torchrun \\",  # zsh, continued over lines
            "  --nproc_per_node=8 \\",
            "  train.py",
            "- cmd: accelerate launch x.py",  # fish
            "  when: 1714590300",
            "  paths:",
            "    - x.py",
            "- cmd: ls",
            "  when: 1714590400",
        ],
    )
    assert [(e.at, e.gpus) for e in events] == [
        (NOW, 2),
        (1714590000, 4),
        (1714590100, None),
        (1714590200, 8),
        (1714590300, None),
    ]
    assert all(e.kind is EventKind.CUE and e.cue == Cue.JOB_SUBMITTED for e in events)
    assert events[3].excerpt == "torchrun --nproc_per_node=8 train.py"
    assert parser.stats.errors == 0


def test_user_patterns_count_as_launches() -> None:
    parser = ShellHistoryParser("me", patterns=[r"\bmake train\b"])
    assert len(feed(parser, ["make train", "make test"])) == 1


def test_timestamped_entries_are_reported_once_and_not_before_since() -> None:
    parser = ShellHistoryParser("me", since=1714590050)
    history = [": 1714590000:0;sbatch old.sh", ": 1714590100:0;sbatch new.sh"]
    assert [e.at for e in feed(parser, history)] == [1714590100]
    parser.rewound(source="h", now=NOW)  # zsh rewrote the file: everything again, plus one
    again = feed(parser, [*history, ": 1714590100:0;sbatch new.sh", ": 1714590200:0;sbatch x"])
    assert [e.at for e in again] == [1714590200]


def test_plain_bash_rewrite_skips_to_where_it_was() -> None:
    parser = ShellHistoryParser("me")
    feed(parser, ["sbatch a.sh", "ls", "sbatch b.sh"])
    parser.rewound(source="h", now=NOW)
    # bash trimmed the file and wrote this session's commands after the old ones
    replay = feed(parser, ["ls", "sbatch b.sh", "sbatch a.sh", "ls", "sbatch b.sh", "sbatch c.sh"])
    assert [e.excerpt for e in replay] == ["sbatch c.sh"]


def test_plain_bash_rewrite_without_the_old_tail_stops_skipping_at_end_of_file() -> None:
    parser = ShellHistoryParser("me")
    feed(parser, ["sbatch a.sh"])
    parser.rewound(source="h", now=NOW)
    assert feed(parser, ["sbatch z.sh"]) == []  # could be old: skipped
    assert parser.caught_up(source="h", now=NOW) == []
    assert [e.excerpt for e in feed(parser, ["sbatch y.sh"])] == ["sbatch y.sh"]


def test_prime_remembers_the_file_without_reporting_it() -> None:
    parser = ShellHistoryParser("me", since=None)
    parser.prime(["sbatch a.sh", ": 1714590000:0;sbatch t.sh"], now=NOW)
    assert parser.stats.events == 0 and parser.stats.lines == 0
    parser.rewound(source="h", now=NOW)
    out = feed(parser, ["sbatch a.sh", ": 1714590000:0;sbatch t.sh", "sbatch new.sh"])
    assert [e.excerpt for e in out] == ["sbatch new.sh"]


def test_secrets_in_commands_are_redacted() -> None:
    parser = ShellHistoryParser("me")
    (event,) = feed(parser, ["HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567 torchrun train.py"])
    assert "AbCdEf" not in repr(event)
