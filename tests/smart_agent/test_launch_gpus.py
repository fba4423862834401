"""GPU counts where people write them: launcher flags, deepspeed --include, and the #SBATCH
lines of the script an sbatch command names (read locally)."""

from __future__ import annotations

from pathlib import Path

import pytest

from smart_agent.parsers.launch import deepspeed_include, sbatch_script, script_options
from smart_agent.parsers.shell import launch_gpus

SCRIPT = """#!/bin/bash
#SBATCH --job-name=llama-ft
#SBATCH --nodes=2
#SBATCH --gpus-per-node=a100:4   # four per node
#SBATCH --time=10:00

module load cuda
#SBATCH --gres=gpu:8
srun python train.py
"""


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("deepspeed --include localhost:0,1 train.py", 2),
        ("deepspeed --include=n1:0,1,2,3@n2:0,1,2,3 train.py", 8),
        ("deepspeed --include localhost:2 llava/train/train_mem.py --version v1", 1),
        ("deepspeed train.py", None),
    ],
)
def test_deepspeed_include(command: str, expected: int | None) -> None:
    assert deepspeed_include(command) == expected
    assert launch_gpus(command)[0] == (expected if expected is not None else None)


def test_sbatch_script_gpus_from_its_sbatch_lines(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "ft.sh").write_text(SCRIPT)
    (tmp_path / "cpu.sh").write_text("#!/bin/bash\n#SBATCH -c 8\n#SBATCH --mem=4G\nmake\n")
    assert sbatch_script("sbatch -p gpu -J x --export=ALL jobs/ft.sh --lr 3") == "jobs/ft.sh"
    assert sbatch_script("sbatch --wrap 'python x.py'") is None
    # Options stop at the first command, as sbatch reads them: the late --gres is ignored.
    assert "--gres" not in script_options(tmp_path / "jobs" / "ft.sh")
    assert launch_gpus("sbatch -p gpu jobs/ft.sh", tmp_path) == (8, "a100")  # 2 nodes x 4
    assert launch_gpus("sbatch cpu.sh", tmp_path) == (0, None)  # a CPU job
    assert launch_gpus("sbatch missing.sh", tmp_path) == (None, None)  # unknown
    assert launch_gpus("sbatch --gres=gpu:2 cpu.sh", tmp_path) == (2, None)  # the flag wins
    assert launch_gpus("sbatch jobs/ft.sh") == (None, None)  # no folder to look in
