"""What the agent must read from each real sample in tests/data/real-inputs/ (SOURCES.md says
where each comes from), written out from reading the files.

Times are UTC; "READ" is the read time (a log line with no time of its own, or a change
seen as it happens). Job tables read whole are a baseline: events only at the times their
rows state, so sacct without Submit/Start/End columns and squeue snapshots without times
give jobs (their last state) but no events. Steps (`.batch`, `.extern`, `.0`) and het-job
components (`176+1`) fold into their job; a pending array (`3_[0-3]`) is no job.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class E:
    """One event: the line it came from, its kind (a cue's name for cues), job, GPUs."""

    line: int
    name: str
    job_id: str | None
    gpus: int | None
    gpu_model: str | None
    at: str
    user: str = "alice"
    cue: str | None = None


@dataclass(frozen=True)
class Expected:
    kind: str
    layout: str | None = None
    recognized: bool = True
    jobs: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    notes: int = 0
    events: list[E] = field(default_factory=list)


EXPECTED: dict[str, Expected] = {
    "deepspeed/D01_accelerate1606_multinode.log": Expected(
        "plain",
        events=[
            E(2, "training_started", None, 8, None, "2023-06-18T23:37:16"),
        ],
    ),
    "hf_trainer/H01_openr1_prefixed_running_training.log": Expected(
        "plain",
        events=[
            E(1, "training_started", None, None, None, "2025-03-06T12:04:09"),
        ],
    ),
    "hf_trainer/H02_optimum_neuron_torchrun32.log": Expected(
        "plain",
        events=[
            E(1, "training_started", None, None, None, "READ"),
        ],
    ),
    "hf_trainer/H03_eval_dicts_tqdm.log": Expected(
        "plain",
        events=[
            E(1, "epoch_end", None, None, None, "READ"),
            E(2, "epoch_end", None, None, None, "READ"),
            E(3, "epoch_end", None, None, None, "READ"),
            E(4, "training_done", None, None, None, "READ"),
        ],
    ),
    "hf_trainer/H04_unsloth_sft.log": Expected(
        "plain",
        events=[
            E(1, "training_started", None, 1, None, "READ"),
            E(12, "training_done", None, None, None, "READ"),
        ],
    ),
    "jsonl/J01_slm_metrics.jsonl": Expected(
        "jsonl",
    ),
    "lightning/L01_cell2location.log": Expected(
        "plain",
        events=[
            E(7, "training_started", None, 1, None, "READ"),
            E(11, "training_done", None, None, None, "READ"),
        ],
    ),
    "lightning/L02_novae_epoch_bar.log": Expected(
        "plain",
        events=[
            E(1, "epoch_end", None, None, None, "READ"),
        ],
    ),
    "lightning/L03_anomalib_rich_bar.log": Expected(
        "plain",
        events=[
            E(1, "training_done", None, None, None, "READ"),
        ],
    ),
    "nvidia_smi/N01_deepracer_418.txt": Expected(
        "plain",
        recognized=False,
    ),
    "sacct/G01_local_sacct_default_fixedwidth.txt": Expected(
        "sacct",
        layout="fixed-width",
        jobs={
            "1": ("COMPLETED", None),
            "2": ("FAILED", None),
            "4": ("COMPLETED", None),
            "3_0": ("COMPLETED", None),
            "3_1": ("COMPLETED", None),
            "3_2": ("COMPLETED", None),
            "3_3": ("COMPLETED", None),
            "8": ("CANCELLED+", None),
            "9": ("TIMEOUT", None),
        },
    ),
    "sacct/G02_local_sacct_P_default_fields.txt": Expected(
        "sacct",
        layout="pipe (-P)",
        jobs={
            "1": ("COMPLETED", None),
            "2": ("FAILED", None),
            "4": ("COMPLETED", None),
            "3_0": ("COMPLETED", None),
            "3_1": ("COMPLETED", None),
            "3_2": ("COMPLETED", None),
            "3_3": ("COMPLETED", None),
            "8": ("CANCELLED by 1001", None),
            "9": ("TIMEOUT", None),
        },
    ),
    "sacct/G03_local_sacct_p_trailing.txt": Expected(
        "sacct",
        layout="pipe (-p)",
        jobs={
            "1": ("COMPLETED", None),
            "2": ("FAILED", None),
            "4": ("COMPLETED", None),
            "3_0": ("COMPLETED", None),
            "3_1": ("COMPLETED", None),
            "3_2": ("COMPLETED", None),
            "3_3": ("COMPLETED", None),
            "8": ("CANCELLED by 1001", None),
            "9": ("TIMEOUT", None),
        },
    ),
    "sacct/G04_local_sacct_P_times_tres.txt": Expected(
        "sacct",
        layout="pipe (-P)",
        jobs={
            "1": ("COMPLETED", 2),
            "2": ("FAILED", 1),
            "4": ("COMPLETED", 2),
            "3_0": ("COMPLETED", 1),
            "3_1": ("COMPLETED", 1),
            "3_2": ("COMPLETED", 1),
            "3_3": ("COMPLETED", 1),
            "8": ("CANCELLED by 1001", 8),
            "9": ("TIMEOUT", 1),
        },
        events=[
            E(2, "job_submitted", "1", 2, "a100", "2026-11-24T17:58:22"),
            E(2, "job_started", "1", 2, "a100", "2026-11-24T17:58:22"),
            E(2, "job_finished", "1", 2, "a100", "2026-11-24T17:58:52"),
            E(5, "job_submitted", "2", 1, "a100", "2026-11-24T17:58:22"),
            E(5, "job_started", "2", 1, "a100", "2026-11-24T17:58:22"),
            E(5, "job_finished", "2", 1, "a100", "2026-11-24T17:58:30"),
            E(7, "job_submitted", "4", 2, "a100", "2026-11-24T17:58:25"),
            E(7, "job_started", "4", 2, "a100", "2026-11-24T17:58:36"),
            E(7, "job_finished", "4", 2, "a100", "2026-11-24T17:59:21"),
            E(10, "job_submitted", "3_0", 1, "a100", "2026-11-24T17:58:25"),
            E(10, "job_started", "3_0", 1, "a100", "2026-11-24T17:58:26"),
            E(10, "job_finished", "3_0", 1, "a100", "2026-11-24T17:58:36"),
            E(12, "job_submitted", "3_1", 1, "a100", "2026-11-24T17:58:25"),
            E(12, "job_started", "3_1", 1, "a100", "2026-11-24T17:58:26"),
            E(12, "job_finished", "3_1", 1, "a100", "2026-11-24T17:58:41"),
            E(14, "job_submitted", "3_2", 1, "a100", "2026-11-24T17:58:25"),
            E(14, "job_started", "3_2", 1, "a100", "2026-11-24T17:58:26"),
            E(14, "job_finished", "3_2", 1, "a100", "2026-11-24T17:58:46"),
            E(16, "job_submitted", "3_3", 1, "a100", "2026-11-24T17:58:25"),
            E(16, "job_started", "3_3", 1, "a100", "2026-11-24T17:58:26"),
            E(16, "job_finished", "3_3", 1, "a100", "2026-11-24T17:58:51"),
            E(18, "job_submitted", "8", 8, None, "2026-11-24T17:58:29"),
            E(18, "job_finished", "8", 8, None, "2026-11-24T17:59:34"),
            E(19, "job_submitted", "9", 1, "a100", "2026-11-24T17:58:29"),
            E(19, "job_started", "9", 1, "a100", "2026-11-24T17:58:29"),
            E(19, "job_finished", "9", 1, "a100", "2026-11-24T17:59:57"),
        ],
    ),
    "sacct/G05_local_sacct_X_n_P_noheader.txt": Expected(
        "sacct",
        layout="inferred",
        jobs={
            "1": ("COMPLETED", 2),
            "2": ("FAILED", 1),
            "4": ("COMPLETED", 2),
            "3_0": ("COMPLETED", 1),
            "3_1": ("COMPLETED", 1),
            "3_2": ("COMPLETED", 1),
            "3_3": ("COMPLETED", 1),
            "8": ("CANCELLED by 1001", None),
            "9": ("TIMEOUT", 1),
        },
        notes=1,
        events=[
            E(1, "job_submitted", "1", 2, "a100", "2026-11-24T17:58:22"),
            E(1, "job_started", "1", 2, "a100", "2026-11-24T17:58:22"),
            E(1, "job_finished", "1", 2, "a100", "2026-11-24T17:58:52"),
            E(2, "job_submitted", "2", 1, "a100", "2026-11-24T17:58:22"),
            E(2, "job_started", "2", 1, "a100", "2026-11-24T17:58:22"),
            E(2, "job_finished", "2", 1, "a100", "2026-11-24T17:58:30"),
            E(3, "job_submitted", "4", 2, "a100", "2026-11-24T17:58:25"),
            E(3, "job_started", "4", 2, "a100", "2026-11-24T17:58:36"),
            E(3, "job_finished", "4", 2, "a100", "2026-11-24T17:59:21"),
            E(4, "job_submitted", "3_0", 1, "a100", "2026-11-24T17:58:25"),
            E(4, "job_started", "3_0", 1, "a100", "2026-11-24T17:58:26"),
            E(4, "job_finished", "3_0", 1, "a100", "2026-11-24T17:58:36"),
            E(5, "job_submitted", "3_1", 1, "a100", "2026-11-24T17:58:25"),
            E(5, "job_started", "3_1", 1, "a100", "2026-11-24T17:58:26"),
            E(5, "job_finished", "3_1", 1, "a100", "2026-11-24T17:58:41"),
            E(6, "job_submitted", "3_2", 1, "a100", "2026-11-24T17:58:25"),
            E(6, "job_started", "3_2", 1, "a100", "2026-11-24T17:58:26"),
            E(6, "job_finished", "3_2", 1, "a100", "2026-11-24T17:58:46"),
            E(7, "job_submitted", "3_3", 1, "a100", "2026-11-24T17:58:25"),
            E(7, "job_started", "3_3", 1, "a100", "2026-11-24T17:58:26"),
            E(7, "job_finished", "3_3", 1, "a100", "2026-11-24T17:58:51"),
            E(8, "job_submitted", "8", None, None, "2026-11-24T17:58:29"),
            E(8, "job_finished", "8", None, None, "2026-11-24T17:59:34"),
            E(9, "job_submitted", "9", 1, "a100", "2026-11-24T17:58:29"),
            E(9, "job_started", "9", 1, "a100", "2026-11-24T17:58:29"),
            E(9, "job_finished", "9", 1, "a100", "2026-11-24T17:59:57"),
        ],
    ),
    "sacct/G06_local_sacct_allusers_X_P_jobidraw.txt": Expected(
        "sacct",
        layout="pipe (-P)",
        jobs={
            "1": ("COMPLETED", 2),
            "2": ("FAILED", 1),
            "4": ("COMPLETED", 2),
            "3_0": ("COMPLETED", 1),
            "3_1": ("COMPLETED", 1),
            "3_2": ("COMPLETED", 1),
            "3_3": ("COMPLETED", 1),
            "8": ("CANCELLED by 1001", None),
            "9": ("TIMEOUT", 1),
            "10": ("COMPLETED", 1),
            "11": ("COMPLETED", 2),
        },
        events=[
            E(2, "job_submitted", "1", 2, "a100", "2026-11-24T17:58:22"),
            E(2, "job_started", "1", 2, "a100", "2026-11-24T17:58:22"),
            E(2, "job_finished", "1", 2, "a100", "2026-11-24T17:58:52"),
            E(3, "job_submitted", "2", 1, "a100", "2026-11-24T17:58:22"),
            E(3, "job_started", "2", 1, "a100", "2026-11-24T17:58:22"),
            E(3, "job_finished", "2", 1, "a100", "2026-11-24T17:58:30"),
            E(4, "job_submitted", "4", 2, "a100", "2026-11-24T17:58:25"),
            E(4, "job_started", "4", 2, "a100", "2026-11-24T17:58:36"),
            E(4, "job_finished", "4", 2, "a100", "2026-11-24T17:59:21"),
            E(5, "job_submitted", "3_0", 1, "a100", "2026-11-24T17:58:25"),
            E(5, "job_started", "3_0", 1, "a100", "2026-11-24T17:58:26"),
            E(5, "job_finished", "3_0", 1, "a100", "2026-11-24T17:58:36"),
            E(6, "job_submitted", "3_1", 1, "a100", "2026-11-24T17:58:25"),
            E(6, "job_started", "3_1", 1, "a100", "2026-11-24T17:58:26"),
            E(6, "job_finished", "3_1", 1, "a100", "2026-11-24T17:58:41"),
            E(7, "job_submitted", "3_2", 1, "a100", "2026-11-24T17:58:25"),
            E(7, "job_started", "3_2", 1, "a100", "2026-11-24T17:58:26"),
            E(7, "job_finished", "3_2", 1, "a100", "2026-11-24T17:58:46"),
            E(8, "job_submitted", "3_3", 1, "a100", "2026-11-24T17:58:25"),
            E(8, "job_started", "3_3", 1, "a100", "2026-11-24T17:58:26"),
            E(8, "job_finished", "3_3", 1, "a100", "2026-11-24T17:58:51"),
            E(9, "job_submitted", "8", None, None, "2026-11-24T17:58:29"),
            E(9, "job_finished", "8", None, None, "2026-11-24T17:59:34"),
            E(10, "job_submitted", "9", 1, "a100", "2026-11-24T17:58:29"),
            E(10, "job_started", "9", 1, "a100", "2026-11-24T17:58:29"),
            E(10, "job_finished", "9", 1, "a100", "2026-11-24T17:59:57"),
            E(11, "job_submitted", "10", 1, "a100", "2026-11-24T17:59:08", user="root"),
            E(11, "job_started", "10", 1, "a100", "2026-11-24T17:59:34", user="root"),
            E(11, "job_finished", "10", 1, "a100", "2026-11-24T18:00:14", user="root"),
            E(12, "job_submitted", "11", 2, "a100", "2026-11-24T17:59:08", user="root"),
            E(12, "job_started", "11", 2, "a100", "2026-11-24T17:59:08", user="root"),
            E(12, "job_finished", "11", 2, "a100", "2026-11-24T18:00:08", user="root"),
        ],
    ),
    "sacct/G07_local_sacct_P_polled_appended.txt": Expected(
        "sacct",
        layout="pipe (-P)",
        jobs={
            "1": ("COMPLETED", 2),
            "2": ("FAILED", 1),
            "4": ("COMPLETED", 2),
            "3_3": ("COMPLETED", 1),
            "3_0": ("COMPLETED", 1),
            "3_1": ("COMPLETED", 1),
            "3_2": ("COMPLETED", 1),
            "8": ("CANCELLED by 1001", 8),
            "9": ("TIMEOUT", 1),
            "10": ("COMPLETED", 1),
            "11": ("COMPLETED", 2),
        },
        events=[
            E(5, "job_submitted", "1", 2, "a100", "2026-11-24T17:58:22"),
            E(5, "job_started", "1", 2, "a100", "2026-11-24T17:58:22"),
            E(8, "job_submitted", "2", 1, "a100", "2026-11-24T17:58:22"),
            E(8, "job_started", "2", 1, "a100", "2026-11-24T17:58:22"),
            E(10, "job_submitted", "4", 2, "a100", "2026-11-24T17:58:25"),
            E(11, "job_submitted", "3_3", 1, "a100", "2026-11-24T17:58:25"),
            E(11, "job_started", "3_3", 1, "a100", "2026-11-24T17:58:26"),
            E(17, "job_finished", "2", 1, "a100", "2026-11-24T17:58:30"),
            E(19, "job_started", "4", 2, "a100", "2026-11-24T17:58:36"),
            E(22, "job_submitted", "3_0", 1, "a100", "2026-11-24T17:58:25"),
            E(22, "job_started", "3_0", 1, "a100", "2026-11-24T17:58:26"),
            E(22, "job_finished", "3_0", 1, "a100", "2026-11-24T17:58:36"),
            E(24, "job_submitted", "3_1", 1, "a100", "2026-11-24T17:58:25"),
            E(24, "job_started", "3_1", 1, "a100", "2026-11-24T17:58:26"),
            E(26, "job_submitted", "3_2", 1, "a100", "2026-11-24T17:58:25"),
            E(26, "job_started", "3_2", 1, "a100", "2026-11-24T17:58:26"),
            E(30, "job_submitted", "8", 8, None, "2026-11-24T17:58:29"),
            E(31, "job_submitted", "9", 1, "a100", "2026-11-24T17:58:29"),
            E(31, "job_started", "9", 1, "a100", "2026-11-24T17:58:29"),
            E(44, "job_finished", "3_1", 1, "a100", "2026-11-24T17:58:41"),
            E(54, "job_finished", "1", 2, "a100", "2026-11-24T17:58:52"),
            E(66, "job_finished", "3_2", 1, "a100", "2026-11-24T17:58:46"),
            E(68, "job_finished", "3_3", 1, "a100", "2026-11-24T17:58:51"),
            E(133, "job_submitted", "10", 1, "a100", "2026-11-24T17:59:08", user="root"),
            E(134, "job_submitted", "11", 2, "a100", "2026-11-24T17:59:08", user="root"),
            E(134, "job_started", "11", 2, "a100", "2026-11-24T17:59:08", user="root"),
            E(142, "job_finished", "4", 2, "a100", "2026-11-24T17:59:21"),
            E(199, "job_finished", "8", 8, None, "2026-11-24T17:59:34"),
            E(202, "job_started", "10", 1, "a100", "2026-11-24T17:59:34", user="root"),
            E(248, "job_finished", "9", 1, "a100", "2026-11-24T17:59:57"),
            E(298, "job_finished", "10", 1, "a100", "2026-11-24T18:00:14", user="root"),
            E(300, "job_finished", "11", 2, "a100", "2026-11-24T18:00:08", user="root"),
        ],
    ),
    "sacct/S01_torchx_hetjob_P.txt": Expected(
        "sacct",
        layout="pipe (-p)",
        jobs={
            "176": ("COMPLETED", None),
        },
    ),
    "sacct/S02_snakemake_failed_P.txt": Expected(
        "sacct",
        layout="pipe (-P)",
        jobs={
            "2355542": ("FAILED", None),
        },
    ),
    "sacct/S03_frontier_alloctres_P.txt": Expected(
        "sacct",
        layout="pipe (-P)",
        jobs={
            "4947951": ("FAILED", 0),
        },
    ),
    "sacct/S04_lazyslurm_array_gpu_noheader.txt": Expected(
        "sacct",
        layout="inferred",
        notes=2,
    ),
    "sacct/S05_cancelled_by_gpu_noheader.txt": Expected(
        "sacct",
        layout="inferred",
        jobs={
            "48412394": ("CANCELLED by 132794", 1),
        },
        notes=1,
    ),
    "sacct/S06_frontier16n_times_noheader.txt": Expected(
        "sacct",
        layout="inferred",
        jobs={
            "4893977": ("COMPLETED", 0),
        },
        notes=1,
        events=[
            E(1, "job_submitted", "4893977", 0, None, "2026-06-24T06:26:44"),
            E(1, "job_started", "4893977", 0, None, "2026-06-24T06:30:40"),
            E(1, "job_finished", "4893977", 0, None, "2026-06-24T06:50:58"),
        ],
    ),
    "sacct/S07_ubhpc_allusers_noheader.txt": Expected(
        "sacct",
        layout="inferred",
        jobs={
            "6322435": ("TIMEOUT", 0),
            "6322436": ("COMPLETED", 0),
        },
        notes=1,
        events=[
            E(1, "job_submitted", "6322435", 0, None, "2021-08-09T00:06:15"),
            E(1, "job_started", "6322435", 0, None, "2021-08-09T00:06:42"),
            E(1, "job_finished", "6322435", 0, None, "2021-08-09T12:06:55"),
            E(2, "job_submitted", "6322436", 0, None, "2021-08-09T00:14:51"),
            E(2, "job_started", "6322436", 0, None, "2021-08-09T00:17:23"),
            E(2, "job_finished", "6322436", 0, None, "2021-08-09T00:22:28"),
        ],
    ),
    "shell/B01_bash_history": Expected(
        "shell_history",
        events=[
            E(1, "job_submitted", None, 2, None, "READ"),
            E(2, "job_submitted", None, 2, None, "READ"),
            E(3, "job_submitted", None, 4, None, "READ"),
            E(11, "job_submitted", None, 2, None, "READ"),
            E(15, "job_submitted", None, 2, None, "READ"),
            E(24, "job_submitted", None, 64, None, "READ"),
            E(25, "job_submitted", None, None, None, "READ"),
            E(26, "job_submitted", None, None, None, "READ"),
            E(27, "job_submitted", None, 2, None, "READ"),
            E(28, "job_submitted", None, None, None, "READ"),
            E(29, "job_submitted", None, None, None, "READ"),
            E(30, "job_submitted", None, 1, None, "READ"),
            E(31, "job_submitted", None, None, None, "READ"),
            E(32, "job_submitted", None, 8, None, "READ"),
            E(33, "job_submitted", None, None, None, "READ"),
            E(36, "job_submitted", None, None, None, "READ"),
            E(38, "job_submitted", None, 4, None, "READ"),
            E(39, "job_submitted", None, 8, None, "READ"),
            E(44, "job_submitted", None, 1, None, "READ"),
            E(45, "job_submitted", None, 2, None, "READ"),
            E(48, "job_submitted", None, 2, None, "READ"),
            E(51, "job_submitted", None, 8, None, "READ"),
            E(58, "job_submitted", None, 4, None, "READ"),
            E(59, "job_submitted", None, None, None, "READ"),
        ],
    ),
    "shell/B02_bash_histtimeformat_history": Expected(
        "shell_history",
        events=[
            E(2, "job_submitted", None, 2, None, "2024-04-30T18:00:00"),
            E(4, "job_submitted", None, 2, None, "2024-04-30T18:01:00"),
            E(6, "job_submitted", None, 4, None, "2024-04-30T18:02:00"),
            E(16, "job_submitted", None, 2, None, "2024-04-30T18:04:00"),
            E(21, "job_submitted", None, 2, None, "2024-04-30T18:05:00"),
            E(31, "job_submitted", None, 64, None, "2024-04-30T18:06:00"),
            E(33, "job_submitted", None, None, None, "2024-04-30T18:07:00"),
            E(35, "job_submitted", None, None, None, "2024-04-30T18:08:00"),
            E(37, "job_submitted", None, 2, None, "2024-04-30T18:09:00"),
            E(39, "job_submitted", None, None, None, "2024-04-30T18:10:00"),
            E(41, "job_submitted", None, None, None, "2024-04-30T18:11:00"),
            E(43, "job_submitted", None, 1, None, "2024-04-30T18:12:00"),
            E(45, "job_submitted", None, None, None, "2024-04-30T18:13:00"),
            E(47, "job_submitted", None, 8, None, "2024-04-30T18:14:00"),
            E(49, "job_submitted", None, None, None, "2024-04-30T18:15:00"),
            E(55, "job_submitted", None, None, None, "2024-04-30T18:18:00"),
            E(59, "job_submitted", None, 4, None, "2024-04-30T18:20:00"),
            E(61, "job_submitted", None, 8, None, "2024-04-30T18:21:00"),
            E(67, "job_submitted", None, 1, None, "2024-04-30T18:22:00"),
            E(69, "job_submitted", None, 2, None, "2024-04-30T18:23:00"),
            E(73, "job_submitted", None, 2, None, "2024-04-30T18:24:00"),
            E(77, "job_submitted", None, 8, None, "2024-04-30T18:25:00"),
            E(85, "job_submitted", None, 4, None, "2024-04-30T18:26:00"),
            E(87, "job_submitted", None, None, None, "2024-04-30T18:27:00"),
        ],
    ),
    "slurm_out/G01_local_sbatch_stdout.txt": Expected(
        "plain",
        events=[
            E(1, "job_submitted", "1", None, None, "READ", cue="job_submitted"),
            E(2, "job_submitted", "2", None, None, "READ", cue="job_submitted"),
            E(3, "job_submitted", "3", None, None, "READ", cue="job_submitted"),
            E(4, "job_submitted", "4", None, None, "READ", cue="job_submitted"),
            E(5, "job_submitted", "8", None, None, "READ", cue="job_submitted"),
            E(6, "job_submitted", "9", None, None, "READ", cue="job_submitted"),
        ],
    ),
    "slurm_out/G_local_slurm-1.out": Expected(
        "plain",
        events=[
            E(3, "training_done", None, None, None, "READ"),
        ],
    ),
    "slurm_out/G_local_slurm-2.out": Expected(
        "plain",
        events=[
            E(2, "training_failed", None, None, None, "READ"),
        ],
    ),
    "slurm_out/G_local_slurm-3_0.out": Expected(
        "plain",
        recognized=False,
    ),
    "slurm_out/G_local_slurm-3_1.out": Expected(
        "plain",
        recognized=False,
    ),
    "slurm_out/G_local_slurm-3_2.out": Expected(
        "plain",
        recognized=False,
    ),
    "slurm_out/G_local_slurm-3_3.out": Expected(
        "plain",
        recognized=False,
    ),
    "slurm_out/G_local_slurm-4.out": Expected(
        "plain",
        events=[
            E(3, "training_done", None, None, None, "READ"),
        ],
    ),
    "slurm_out/G_local_slurm-9.out": Expected(
        "plain",
        events=[
            E(2, "job_finished", "9", None, None, "2026-11-24T17:59:57", cue="job_timeout"),
        ],
    ),
    "slurm_out/O01_zetta_timelimit.out": Expected(
        "plain",
        events=[
            E(2, "job_finished", "494583", None, None, "2024-04-20T09:09:37", cue="job_timeout"),
        ],
    ),
    "slurm_out/O02_desitarget_srun_step.out": Expected(
        "plain",
        events=[
            E(3, "job_finished", "32233190", None, None, "2020-07-03T02:59:56", cue="job_timeout"),
        ],
    ),
    "squeue/G01_local_squeue_default_appended.txt": Expected(
        "squeue",
        jobs={
            "3_[0-3]": ("PD", None),
            "2": ("R", None),
            "3_0": ("R", None),
            "3_1": ("R", None),
            "1": ("R", None),
            "3_2": ("R", None),
            "3_3": ("R", None),
            "4": ("R", None),
            "8": ("PD", None),
            "9": ("R", None),
            "10": ("R", None),
            "11": ("R", None),
        },
    ),
    "squeue/G02_local_squeue_o_b_appended.txt": Expected(
        "squeue",
        jobs={
            "3_[0-3]": ("PENDING", 1),
            "2": ("RUNNING", None),
            "3_0": ("RUNNING", 1),
            "3_1": ("RUNNING", 1),
            "1": ("RUNNING", 2),
            "3_2": ("RUNNING", 1),
            "3_3": ("RUNNING", 1),
            "4": ("RUNNING", 2),
            "8": ("PENDING", 8),
            "9": ("RUNNING", 1),
            "10": ("RUNNING", 1),
            "11": ("RUNNING", 2),
        },
    ),
    "squeue/G03_local_squeue_O_pipe_appended.txt": Expected(
        "squeue",
        jobs={
            "2": ("RUNNING", None),
            "5": ("RUNNING", 1),
            "6": ("RUNNING", 1),
            "1": ("RUNNING", 2),
            "7": ("RUNNING", 1),
            "3": ("RUNNING", 1),
            "4": ("RUNNING", 2),
            "8": ("PENDING", 8),
            "9": ("RUNNING", 1),
            "10": ("RUNNING", 1),
            "11": ("RUNNING", 2),
        },
        events=[
            E(3, "job_submitted", "1", 2, "a100", "2026-11-24T17:58:22"),
            E(4, "job_submitted", "2", None, None, "2026-11-24T17:58:22"),
            E(6, "job_submitted", "3", 1, None, "2026-11-24T17:58:25"),
            E(7, "job_submitted", "4", 2, "a100", "2026-11-24T17:58:25"),
            E(8, "job_started", "1", 2, "a100", "2026-11-24T17:58:22"),
            E(9, "job_started", "2", None, None, "2026-11-24T17:58:22"),
            E(12, "job_submitted", "8", 8, None, "2026-11-24T17:58:29"),
            E(13, "job_submitted", "9", 1, None, "2026-11-24T17:58:29"),
            E(16, "job_submitted", "5", 1, None, "2026-11-24T17:58:25"),
            E(16, "job_started", "5", 1, None, "2026-11-24T17:58:26"),
            E(17, "job_submitted", "6", 1, None, "2026-11-24T17:58:25"),
            E(17, "job_started", "6", 1, None, "2026-11-24T17:58:26"),
            E(18, "job_submitted", "7", 1, None, "2026-11-24T17:58:25"),
            E(18, "job_started", "7", 1, None, "2026-11-24T17:58:26"),
            E(19, "job_started", "3", 1, None, "2026-11-24T17:58:26"),
            E(26, "job_started", "4", 2, "a100", "2026-11-24T17:58:36"),
            E(27, "job_started", "9", 1, None, "2026-11-24T17:58:29"),
            E(45, "job_submitted", "10", 1, "a100", "2026-11-24T17:59:08", user="root"),
            E(48, "job_submitted", "11", 2, "a100", "2026-11-24T17:59:08", user="root"),
            E(48, "job_started", "11", 2, "a100", "2026-11-24T17:59:08", user="root"),
            E(67, "job_started", "10", 1, "a100", "2026-11-24T17:59:34", user="root"),
        ],
    ),
    "squeue/Q01_adroit_default.txt": Expected(
        "squeue",
        jobs={
            "660090": ("PD", None),
            "661432": ("PD", None),
            "661431_[6-7]": ("PD", None),
            "661439": ("R", None),
            "661429_6": ("R", None),
            "661429_7": ("R", None),
            "660093": ("R", None),
            "660092": ("R", None),
            "660091": ("R", None),
            "660087": ("R", None),
            "660999": ("R", None),
        },
    ),
    "squeue/Q02_snakemake_wide.txt": Expected(
        "squeue",
        jobs={
            "2355521": ("R", None),
            "2355522": ("R", None),
            "2355531": ("R", None),
            "2355501": ("R", None),
        },
    ),
    "squeue/Q03_tres_per_node_b.txt": Expected(
        "squeue",
        jobs={
            "3584": ("PENDING", 2),
            "3575": ("PENDING", 2),
        },
    ),
    "torchrun/T01_codellama_invalid_ordinal.log": Expected(
        "plain",
        events=[
            E(5, "training_failed", None, None, None, "READ"),
            E(10, "training_failed", None, None, None, "READ"),
        ],
    ),
    "torchrun/T02_colossalai_bash_x_trace.log": Expected(
        "plain",
        events=[
            E(22, "training_started", None, 4, None, "READ"),
        ],
    ),
}
