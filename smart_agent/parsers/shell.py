"""Shell history (bash, bash with HISTTIMEFORMAT, zsh extended, fish): job-launching commands
become `job_submitted` cues, each once, even when the shell rewrites its history file."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Sequence
from datetime import tzinfo
from pathlib import Path

from predictors.types import Cue, Event, EventKind
from smart_agent.parsers.base import BaseParser
from smart_agent.parsers.launch import (
    deepspeed_include,
    resolve_script,
    sbatch_script,
    script_options,
)
from smart_agent.parsers.times import plausible
from smart_agent.redact import Redactor

_PATH = r"(?:\S*/)?"
_PY = _PATH + r"python[\d.]*\s+(?:-[A-Za-z]+\s+)*"
# Matched at the start of one command of a command line, after env assignments and wrappers.
DEFAULT_LAUNCHERS: tuple[str, ...] = (
    _PATH + r"(?:sbatch|srun|salloc)\b",
    _PATH + r"torchrun\b",
    _PY + r"-m\s+torch\.distributed\.(?:run|launch)\b",
    _PATH + r"accelerate\s+launch\b",
    _PATH + r"deepspeed\b",
    _PY + r"\S*train\w*\.py\b",
)
_WRAPPERS = re.compile(
    r"^(?:(?:\w+=\S*|nohup|time|exec|nice(?:\s+-n\s*-?\d+)?|env|command|stdbuf\s+\S+"
    r"|(?:uv|poetry|pipenv|pixi)\s+run|conda\s+run\s+(?:-n|--name)\s+\S+)\s+)+"
)
_SEPARATORS = re.compile(r"\s*(?:&&|\|\||;|\||&)\s*")
# `--version v1` is a training script's own option, not a launcher asked for its version.
_HELP = re.compile(r"\s(?:--help|-h|-V)(?:\s|$)|\s--version\s*$")
_PER_NODE = re.compile(
    r"(?:--gres[= ]\S*?gpu(?::(?P<model>[A-Za-z][\w.-]*))?:(?P<gres>\d+)"
    r"|--gpus-per-node[= ](?:(?P<model2>[A-Za-z][\w.-]*):)?(?P<gpn>\d+)"
    r"|--nproc[_-]per[_-]node[= ](?P<nproc>\d+)|--num[_-]gpus[= ](?P<ng>\d+))"
)
_TOTAL = re.compile(
    r"(?:--gpus|-G|--num[_-]processes)[= ](?:(?P<model>[A-Za-z][\w.-]*):)?(?P<n>\d+)\b"
)
_NODES = re.compile(r"(?:--nodes|--nnodes|-N)[= ](?P<n>\d+)\b")
_CVD = re.compile(r"\bCUDA_VISIBLE_DEVICES=(?P<ids>[\d,]+)")
_ZSH = re.compile(r"^: (\d{9,11}):\d+;(.*)$", re.S)
_BASH_TIME = re.compile(r"^#(\d{9,11})\s*$")


def launch_gpus(command: str, base: Path | None = None) -> tuple[int | None, str | None]:
    """GPUs a launch command asks for, and their model, from the usual flags; for `sbatch
    script.sh` without GPU flags, from the script's `#SBATCH` lines (relative paths
    against `base`, the folder the command ran in when known)."""
    gpus, model = _flag_gpus(command)
    if gpus is None:
        script = sbatch_script(command)
        path = resolve_script(script, base) if script else None
        if path is not None:
            gpus, model = _flag_gpus(script_options(path))
            # A batch script read whole that asks for no GPU gets none from Slurm.
            gpus = 0 if gpus is None else gpus
    return gpus, model


def _flag_gpus(command: str) -> tuple[int | None, str | None]:
    included = deepspeed_include(command)
    if included is not None:
        return included, None
    nodes_m = _NODES.search(command)
    nodes = int(nodes_m.group("n")) if nodes_m and len(nodes_m.group("n")) < 5 else 1
    total = _TOTAL.search(command)
    if total and len(total.group("n")) < 6:
        return int(total.group("n")), total.group("model")
    per = _PER_NODE.search(command)
    if per:
        value = next(v for v in (per["gres"], per["gpn"], per["nproc"], per["ng"]) if v)
        if len(value) < 6:
            return int(value) * nodes, per["model"] or per["model2"]
    visible = _CVD.search(command)
    if visible:
        return len([d for d in visible.group("ids").split(",") if d]) or None, None
    return None, None


class ShellHistoryParser(BaseParser):
    """Each command that launches a job (default launchers, plus `patterns` searched in the
    command) gives one `job_submitted` cue with the GPUs its flags ask for.

    Shells rewrite their history file (trimming it, or merging sessions), and the reader
    then sees the whole file again. Timestamped entries are de-duplicated by (time, command)
    and entries older than `since` are skipped; for plain bash lines (no time), after a
    rewrite the parser skips lines until it has passed the last lines it saw before, or the
    reader has caught up with the end of the file.
    """

    name = "shell_history"

    def __init__(
        self,
        user: str,
        *,
        patterns: Sequence[str] = (),
        redactor: Redactor | None = None,
        tz: tzinfo | None = None,
        since: float | None = None,
        max_seen: int = 4096,
        tail: int = 8,
        script_base: Path | None = None,
    ) -> None:
        super().__init__(user, redactor=redactor, tz=tz)
        self.script_base = script_base  # where `sbatch script.sh` scripts are looked for
        self.launchers = [re.compile(p) for p in DEFAULT_LAUNCHERS]
        self.patterns = [re.compile(p) for p in patterns]
        self.since = since
        self._seen: set[tuple[float, str]] = set()
        self._order: deque[tuple[float, str]] = deque()
        self._max_seen = max_seen
        self._floor = float("-inf")  # entries at or before this time are old
        self._tail: deque[str] = deque(maxlen=tail)
        self._resync: tuple[str, ...] | None = None
        self._window: deque[str] = deque(maxlen=tail)
        self._at: float | None = None  # time from a `#epoch` line (bash) or fish's `when:`
        self._pending: list[str] = []  # a command continued over lines with a backslash
        self._pending_at: float | None = None
        self._fish: str | None = None
        self._muted = False

    # -- hooks -------------------------------------------------------------------------

    def rewound(self, *, source: str, now: float) -> None:
        self._resync = tuple(self._tail) or None
        self._window.clear()
        self._at, self._pending, self._fish = None, [], None

    def caught_up(self, *, source: str, now: float) -> list[Event]:
        self._resync = None
        return []

    def prime(self, lines: Iterable[str], *, now: float) -> None:
        """Read lines already in the file (the reader starts at its end) without emitting:
        remembers their commands so that a later rewrite does not replay them."""
        self._muted = True
        try:
            for line in lines:
                self.parse(line, source="", now=now)
        finally:
            self._muted = False
            self.stats.lines = self.stats.events = self.stats.unknown = 0
            self._at, self._pending, self._fish = None, [], None

    # -- lines -------------------------------------------------------------------------

    def _parse(self, line: str, source: str, now: float) -> list[Event] | None:
        text = line.rstrip("\r\n")
        if self._pending:
            return self._continue(text, source, now)
        if not text.strip():
            return []
        stamp = _BASH_TIME.match(text)
        if stamp:
            self._at = float(stamp.group(1))
            return []
        zsh = _ZSH.match(text)
        if zsh:
            return self._start(float(zsh.group(1)), zsh.group(2), source, now)
        if text.startswith("- cmd: "):
            events = self._flush_fish(source, now)
            self._fish = text[7:]
            return events
        if self._fish is not None and text.lstrip().startswith("when:"):
            value = text.split(":", 1)[1].strip()
            at = float(value) if value.isdigit() and len(value) < 12 else None
            command, self._fish = self._fish, None
            return self._command(at, command.replace("\\n", "\n"), source, now)
        if self._fish is not None and text.startswith("  "):
            return []  # fish's `paths:` and its items
        at, self._at = self._at, None
        return self._flush_fish(source, now) + self._start(at, text, source, now)

    def _start(self, at: float | None, text: str, source: str, now: float) -> list[Event]:
        if text.endswith("\\"):
            self._pending = [text[:-1]]
            self._pending_at = at
            return []
        return self._command(at, text, source, now)

    def _continue(self, text: str, source: str, now: float) -> list[Event]:
        if text.endswith("\\") and len(self._pending) < 64:
            self._pending.append(text[:-1])
            return []
        command = " ".join([*self._pending, text.removesuffix("\\")])
        self._pending = []
        return self._command(self._pending_at, command, source, now)

    def _flush_fish(self, source: str, now: float) -> list[Event]:
        command, self._fish = self._fish, None
        return [] if command is None else self._command(None, command, source, now)

    def _command(self, at: float | None, command: str, source: str, now: float) -> list[Event]:
        if at is not None and (self._old(at, command) or plausible(at, now) is None):
            return []
        if at is None:
            self._tail.append(command)
            if self._resync is not None:
                self._window.append(command)
                if tuple(self._window)[-len(self._resync) :] == self._resync:
                    self._resync = None
                return []
        if self._muted or not self.is_launch(command):
            return []
        gpus, model = launch_gpus(command, self.script_base)
        return [
            self.event(
                EventKind.CUE,
                now if at is None else at,
                source=source,
                text=command,
                cue=Cue.JOB_SUBMITTED,
                gpus=gpus,
                gpu_model=model,
            )
        ]

    def _old(self, at: float, command: str) -> bool:
        """Seen before, or older than what this parser should report; remembers it."""
        key = (at, command)
        if at <= self._floor or key in self._seen:
            return True
        self._seen.add(key)
        self._order.append(key)
        if len(self._order) > self._max_seen:
            dropped = self._order.popleft()
            self._seen.discard(dropped)
            self._floor = max(self._floor, dropped[0])
        return self.since is not None and at < self.since

    def is_launch(self, command: str) -> bool:
        if any(p.search(command) for p in self.patterns):
            return True
        for part in _SEPARATORS.split(command.strip()):
            part = _WRAPPERS.sub("", part.strip(" ({"))
            if any(p.match(part) for p in self.launchers) and not _HELP.search(part):
                return True
        return False
