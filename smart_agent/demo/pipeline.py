"""The demo's user: a pipeline that preprocesses, then launches a training job, round after
round, writing the log lines a real one would (secrets included, which the agent redacts)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TRAIN = Path(__file__).with_name("train.py")


@dataclass(frozen=True)
class Round:
    gpus: int
    think_s: float  # from "preprocessing done" to the job's launch
    epochs: int = 3


# Think times leave the agent room to warm (6 s) before each launch; a job runs longer than
# the warm-up, so that a cold start is measured. The whole story takes under two minutes.
ROUNDS = (Round(2, 9.0), Round(2, 9.0), Round(2, 8.0), Round(4, 9.0), Round(2, 8.0))


def run_pipeline(
    folder: Path,
    say: Callable[[str], None],
    *,
    rounds: tuple[Round, ...] = ROUNDS,
    epoch_s: float = 2.5,
    pause_s: float = 2.0,
    check: Callable[[], None] = lambda: None,
) -> list[float]:
    """Play every round; returns when the last job has ended. Job start times, for the summary.

    `check` runs before each step and may raise to stop the play (the demo's check that the
    control plane, the nodes and the agent are still running)."""
    log = folder / "pipeline.log"
    starts = []
    with log.open("a", buffering=1) as out:
        for i, r in enumerate(rounds, 1):
            check()
            say(f"round {i}: preprocessing")
            out.write(
                f"[round {i}] loading raw shards from s3://datasets/raw (token "
                f"hf_{'x' * 30}, contact alice@example.com)\n"
            )
            for shard in range(3):
                time.sleep(0.5)
                out.write(f"[round {i}] tokenizing shard {shard + 1}/3 on 10.0.0.{shard + 7}\n")
            out.write(f"[round {i}] preprocessing done\n")
            say(f"round {i}: preprocessing done; training ({r.gpus} GPUs) in {r.think_s:.0f}s")
            time.sleep(r.think_s)
            check()
            say(f"round {i}: launching train.py --nproc_per_node {r.gpus}")
            starts.append(time.time())
            subprocess.run(
                [
                    sys.executable,
                    str(TRAIN),
                    "--nproc_per_node",
                    str(r.gpus),
                    "--epochs",
                    str(r.epochs),
                    "--epoch-s",
                    str(epoch_s),
                    "--log",
                    str(log),
                ],
                check=True,
            )
            if i < len(rounds):
                time.sleep(pause_s)
    return starts
