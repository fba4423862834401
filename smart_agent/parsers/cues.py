"""Cue rules: regexes that recognise pipeline stages in log text, with built-in defaults for
common training frameworks; user rules are tried before the defaults."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from predictors.types import Cue, EventKind

# Cue names beyond predictors.types.Cue that the built-in rules emit.
TRAINING_STARTED = "training_started"
TRAINING_FAILED = "training_failed"
LAST_EPOCH = "last_epoch"
PROCESS_STARTED = "process_started"
# A Slurm job ended by Slurm, not by itself: none of these is a normal end.
JOB_CANCELLED = "job_cancelled"
JOB_ENDINGS = {
    "TIME LIMIT": "job_timeout",
    "PREEMPTION": "job_preempted",
    "NODE FAILURE": "job_node_fail",
}

STRONG_CUES: frozenset[str] = frozenset(
    {Cue.PREPROCESSING_DONE, Cue.TRAINING_DONE, Cue.JOB_SUBMITTED}
)
GROUPS = ("epoch", "total", "gpus", "devices", "job_id", "gpu_model", "at", "why")


@dataclass(frozen=True, slots=True)
class CueRule:
    """`pattern` (searched, case-insensitive unless `case_sensitive`) names a cue. Named
    groups used when present: `gpus` (a count), `devices` (a list like `0,1,2` whose length
    is the GPU count), `job_id`, `gpu_model`, `epoch` and `total` (epoch N of M; N >= M
    turns an `epoch_end` into `last_epoch`). `kind` other than `cue` makes job events."""

    name: str
    pattern: str
    strong: bool = False
    kind: EventKind = EventKind.CUE
    case_sensitive: bool = False
    # Lower-case words of which the line must hold one for the rule to be tried: a cheap
    # test that spares most lines most regexes (case-insensitive ones are slow to search).
    hints: tuple[str, ...] = ()
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        flags = 0 if self.case_sensitive else re.IGNORECASE
        object.__setattr__(self, "regex", re.compile(self.pattern, flags))


def _rule(
    name: str, pattern: str, hints: tuple[str, ...], kind: EventKind = EventKind.CUE
) -> CueRule:
    return CueRule(name, pattern, strong=name in STRONG_CUES, kind=kind, hints=hints)


_ENDED = ("done", "finish", "complete")


_DONE = r"(?:is\s+|has\s+)?(?:done|finished|completed?|complete!?)\b"

_LAUNCH_GPUS = (
    r"(?:torchrun|torch\.distributed\.(?:run|launch))\b.*?--nproc[_-]per[_-]node[= ](?P<gpus>\d+)"
    r"|\bdeepspeed\b.*?--include[= ]\S*?:(?P<devices>[\d,]+)"
    r"|\bdeepspeed\b.*?--num[_-]gpus[= ](?P<gpus2>\d+)"
    r"|\baccelerate\s+launch\b.*?--num[_-]processes[= ](?P<gpus3>\d+)"
)

# First match wins, so the specific framework lines come before the generic phrases.
DEFAULT_RULES: tuple[CueRule, ...] = (
    # Slurm: sbatch's own output, and slurmstepd ending a job (or its step) itself
    _rule(
        Cue.JOB_SUBMITTED,
        r"\bSubmitted batch job (?P<job_id>\d+)",
        ("submitted batch",),
        EventKind.JOB_SUBMITTED,
    ),
    _rule(
        JOB_CANCELLED,
        r"\*\*\* (?:JOB|STEP) (?P<job_id>\d+)(?:[._+]\S*)? ON \S+ CANCELLED AT (?P<at>\S+)"
        r"(?: DUE TO (?P<why>TIME LIMIT|PREEMPTION|NODE FAILURE))?",
        ("cancelled at",),
        EventKind.JOB_FINISHED,
    ),
    # Launch commands echoed in a log (bash -x, a wrapper script): the GPUs they ask for
    _rule(TRAINING_STARTED, _LAUNCH_GPUS, ("torchrun", "torch.distributed", "deepspeed", "launch")),
    # PyTorch Lightning, Hugging Face Trainer, torchrun (elastic agent)
    _rule(Cue.TRAINING_DONE, r"`Trainer\.fit` stopped", ("trainer.fit",)),
    _rule(Cue.TRAINING_DONE, r"Training completed\. Do not forget to share", ("completed",)),
    _rule(Cue.TRAINING_DONE, r"['\"]train_runtime['\"]\s*:", ("train_runtime",)),
    _rule(
        Cue.TRAINING_DONE,
        r"Local worker group finished|WorkerState\.SUCCEEDED",
        ("worker group", "succeeded"),
    ),
    _rule(
        TRAINING_FAILED,
        r"WorkerState\.FAILED|ChildFailedError|CUDA out of memory|OutOfMemoryError"
        r"|NCCL (?:error|timeout)|\bfailed \(exitcode: -?\d+\)|\bCUDA error: ",
        ("failed", "memory", "nccl", "cuda error"),
    ),
    # The last line of a Python traceback: `SomeError: message` at the start of a line
    _rule(
        TRAINING_FAILED,
        r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt): ",
        ("error: ", "exception: ", "interrupt: "),
    ),
    _rule(TRAINING_STARTED, r"\*{3,}\s*Running training\s*\*{3,}", ("running training",)),
    _rule(
        TRAINING_STARTED,
        r"CUDA_VISIBLE_DEVICES:\s*\[(?P<devices>[\d,\s]+)\]",
        ("cuda_visible_devices",),
    ),
    _rule(TRAINING_STARTED, r"^\s*nproc_per_node\s*:\s*(?P<gpus>\d+)\s*$", ("nproc_per_node",)),
    _rule(TRAINING_STARTED, r"\bnum_local_procs=(?P<gpus>\d+)", ("num_local_procs",)),  # DeepSpeed
    _rule(TRAINING_STARTED, r"^\s*Num processes:\s*(?P<gpus>\d+)\s*$", ("num processes",)),
    _rule(TRAINING_STARTED, r"\bNum GPUs = (?P<gpus>\d+)", ("num gpus",)),  # Unsloth
    _rule(
        TRAINING_STARTED,
        r"\b(?:training|train)\s+(?:is\s+)?(?:started|starting)\b"
        r"|\bstart(?:ing|ed)? training\b",
        ("start",),
    ),
    # Checkpoints: HF Trainer, Lightning ModelCheckpoint, DeepSpeed, generic
    _rule(Cue.CHECKPOINT_SAVED, r"Saving model checkpoint (?:to|:)", ("checkpoint",)),
    _rule(Cue.CHECKPOINT_SAVED, r"\bsaving model to ['\"]", ("saving model",)),
    _rule(
        Cue.CHECKPOINT_SAVED,
        r"\[Torch\] Checkpoint \S+ is ready now|zero checkpoint saved",
        ("checkpoint",),
    ),
    _rule(
        Cue.CHECKPOINT_SAVED,
        r"\bcheckpoint (?:is\s+)?(?:saved|written)\b"
        r"|\bsav(?:ed|ing) (?:a |the |model |latest )?checkpoint\b",
        ("checkpoint",),
    ),
    # Stages finished
    _rule(
        Cue.PREPROCESSING_DONE,
        r"\b(?:pre-?processing|data ?prep(?:aration)?|data loading|tokeni[sz]ation"
        r"|feature extraction|dataset (?:preparation|build(?:ing)?))\s+"
        + _DONE
        + r"|\bfinished (?:pre-?processing|tokeni[sz]ing|tokeni[sz]ation|data ?prep)",
        _ENDED,
    ),
    _rule(
        Cue.TRAINING_DONE, r"\b(?:training|train)\s+" + _DONE + r"|\bfinished training\b", _ENDED
    ),
    # Epochs: Lightning's bar at 100%, HF's integral epoch, "epoch N/M", "end of epoch N"
    _rule(Cue.EPOCH_END, r"\bEpoch (?P<epoch>\d+):\s+100%", ("100%",)),
    # HF logs `'epoch': 0.0` from its first steps: only a whole epoch after 0 has ended
    _rule(Cue.EPOCH_END, r"['\"]epoch['\"]\s*:\s*(?P<epoch>[1-9]\d*)\.0\b", (".0",)),
    _rule(
        Cue.EPOCH_END, r"\bepoch\s*[\[:]?\s*(?P<epoch>\d+)\s*(?:/|of)\s*(?P<total>\d+)", ("epoch",)
    ),
    _rule(
        Cue.EPOCH_END,
        r"\bend of epoch\s*(?P<epoch>\d+)|\bepoch\s*(?P<epoch_done>\d+)\s+" + _DONE,
        ("end of epoch", *_ENDED),
    ),
)


@dataclass(frozen=True, slots=True)
class CueHit:
    rule: CueRule
    name: str
    gpus: int | None
    job_id: str | None
    gpu_model: str | None
    at: str | None = None  # a time the line states for what it reports


def _small_int(text: str | None) -> int | None:
    if text is None or len(text) > 7 or not text.isdigit():
        return None
    return int(text)


class CueMatcher:
    """Finds the first rule matching a text; user rules first, then (optionally) defaults."""

    def __init__(self, rules: Iterable[CueRule] = (), *, defaults: bool = True) -> None:
        self.rules: Sequence[CueRule] = (*rules, *(DEFAULT_RULES if defaults else ()))
        self.strong: frozenset[str] = frozenset(r.name for r in self.rules if r.strong)
        self.names: frozenset[str] = frozenset(r.name for r in self.rules)

    def match(self, text: str) -> CueHit | None:
        low: str | None = None
        for rule in self.rules:
            if rule.hints:
                if low is None:
                    low = text.lower()
                if not any(hint in low for hint in rule.hints):
                    continue
            found = rule.regex.search(text)
            if found is not None:
                return _hit(rule, found)
        return None


def _hit(rule: CueRule, found: re.Match[str]) -> CueHit:
    groups = found.groupdict()
    gpus = _small_int(groups.get("gpus") or groups.get("gpus2") or groups.get("gpus3"))
    devices = groups.get("devices")
    if gpus is None and devices:
        gpus = len([d for d in re.split(r"[,\s]+", devices) if d]) or None
    name = rule.name
    if name == Cue.EPOCH_END:
        epoch, total = _small_int(groups.get("epoch")), _small_int(groups.get("total"))
        if epoch is not None and total and epoch >= total:
            name = LAST_EPOCH
    if name == JOB_CANCELLED and groups.get("why"):
        name = JOB_ENDINGS.get(groups["why"], name)
    return CueHit(rule, name, gpus, groups.get("job_id"), groups.get("gpu_model"), groups.get("at"))
