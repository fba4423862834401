"""The agent's inputs: config of what to watch, and `Sources`, which runs the watchers, parsers
and process watch and hands every event, already redacted, to one callback."""

from __future__ import annotations

import getpass
import logging
import re
import threading
import time
from collections.abc import Callable
from datetime import tzinfo
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

from predictors.types import Event, EventKind
from smart_agent.debounce import Debouncer
from smart_agent.parsers.auto import kind_for_path, make_parser
from smart_agent.parsers.base import Parser
from smart_agent.parsers.cues import CueMatcher, CueRule
from smart_agent.parsers.shell import ShellHistoryParser
from smart_agent.procwatch import ProcessSource, ProcessWatcher
from smart_agent.redact import PrivateKeyGuard, Redactor
from smart_agent.slurm_source import SlurmConfig, SlurmSource
from smart_agent.watch.paths import DEFAULT_EXCLUDE, WatchSpec
from smart_agent.watch.snapshot import is_job_table
from smart_agent.watch.tailer import CAUGHT_UP, REWOUND
from smart_agent.watch.watcher import Watcher

log = logging.getLogger(__name__)
ParserName = Literal["auto", "plain", "jsonl", "sacct", "squeue", "shell_history", "jobs_csv"]
PollingMode = Literal["auto", "always", "never"]
PRIME_BYTES = 16 * 1024  # end of a shell history read at start, so rewrites do not replay it
UNRECOGNIZED_AFTER = 20  # lines read, none understood: the file is said to be unrecognised


def login_name() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no login name (a container without a passwd entry)
        return "unknown"


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WatchEntry(_Strict):
    """A file or folder to follow; see docs/smart-agent-inputs.md."""

    path: str = Field(min_length=1, description="File or folder; ~ is expanded.")
    include: list[str] = Field(default_factory=lambda: ["*"], max_length=100)
    exclude: list[str] = Field(default_factory=lambda: list(DEFAULT_EXCLUDE), max_length=100)
    parser: ParserName = "auto"
    backfill: bool = Field(default=False, description="Read existing content from the start.")
    recursive: bool = True
    polling: PollingMode | None = Field(default=None, description="Overrides the top level.")
    t0: float = Field(default=0.0, description="jobs_csv: epoch seconds of time 0.")
    sacct_fields: list[str] | None = Field(
        default=None,
        max_length=100,
        description="sacct without a header (-n): the --format columns, in order.",
    )

    @field_validator("sacct_fields")
    @classmethod
    def _fields(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not all(re.fullmatch(r"[A-Za-z][A-Za-z0-9_%]*", f) for f in value):
            raise ValueError("sacct field names are words like JobID, State, Submit, AllocTRES")
        return value


class CueEntry(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")
    pattern: str = Field(min_length=1, max_length=1000)
    strong: bool = False
    kind: Literal["cue", "job_submitted", "job_started", "job_finished"] = "cue"
    case_sensitive: bool = False

    _check = field_validator("pattern")(_regex)

    def rule(self) -> CueRule:
        return CueRule(
            self.name,
            self.pattern,
            strong=self.strong,
            kind=EventKind(self.kind),
            case_sensitive=self.case_sensitive,
        )


class ProcessesConfig(_Strict):
    patterns: list[str] = Field(
        default_factory=list, max_length=100, description="Regexes searched in each command line."
    )
    interval_s: float = Field(default=2.0, ge=0.2, le=3600)
    all_users: bool = Field(default=False, description="Also other users' processes.")

    @field_validator("patterns")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        return [_regex(p) for p in value]


class RedactConfig(_Strict):
    patterns: list[str] = Field(default_factory=list, max_length=100)

    @field_validator("patterns")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        return [_regex(p) for p in value]


class SourcesConfig(_Strict):
    """The inputs part of the agent's config (keys at the top level of its YAML)."""

    user: str = Field(default_factory=login_name, min_length=1, max_length=64)
    watch: list[WatchEntry] = Field(default_factory=list, max_length=200)
    cues: list[CueEntry] = Field(default_factory=list, max_length=200)
    default_cues: bool = Field(default=True, description="Use the built-in cue rules too.")
    processes: ProcessesConfig = Field(default_factory=ProcessesConfig)
    polling: PollingMode = "auto"
    poll_s: float = Field(
        default=1.0, ge=0.1, le=600, description="How often files are checked for new lines."
    )
    max_files: int = Field(default=1000, ge=1, le=100_000)
    max_line_bytes: int = Field(default=64 * 1024, ge=256, le=16 * 1024 * 1024)
    timezone: str = Field(default="local", description="Zone of log times written without one.")
    redact: RedactConfig = Field(default_factory=RedactConfig)
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        if value != "local":
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(
                    f"unknown time zone {value!r}; use 'local' or an IANA "
                    "name such as 'Europe/Paris'"
                ) from None
        return value

    def tzinfo(self) -> tzinfo | None:
        return None if self.timezone == "local" else ZoneInfo(self.timezone)


class _Stream:
    """One file's parser and private-key guard."""

    __slots__ = ("guard", "label", "parser")

    def __init__(self, parser: Parser, label: str) -> None:
        self.parser = parser
        self.guard = PrivateKeyGuard()
        self.label = label


def source_label(path: Path, home: Path | None = None) -> str:
    """How events name a file: under the home folder as `~/...` (no user name in it)."""
    home = home or Path.home()
    try:
        return "~/" + path.relative_to(home).as_posix()
    except ValueError:
        return path.as_posix()


class Sources:
    """Builds the watcher, parsers and process watch from `config`; `on_event(event)` gets
    every event (redacted), one call at a time, from the watcher's or the process watch's
    thread, so it should be quick (e.g. put the event on a queue). Exceptions it raises are
    logged and dropped. `clock` gives event times for lines without a time of their own."""

    def __init__(
        self,
        config: SourcesConfig,
        on_event: Callable[[Event], None],
        *,
        clock: Callable[[], float] = time.time,
        process_source: ProcessSource | None = None,
        home: Path | None = None,
        on_unrecognized: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.on_event = on_event
        self.clock = clock
        self.redactor = Redactor(config.redact.patterns)
        self.matcher = CueMatcher((c.rule() for c in config.cues), defaults=config.default_cues)
        self.strong_cues: frozenset[str] = self.matcher.strong
        self.tz = config.tzinfo()
        self._home = home or Path.home()
        self._lock = threading.Lock()
        self._streams: dict[Path, _Stream] = {}
        self._since: float | None = None
        self.events = 0
        self.callback_errors = 0
        self.unrecognized: list[str] = []
        self.on_unrecognized = on_unrecognized
        specs = [
            WatchSpec(
                path=self._expand(entry.path),
                include=tuple(entry.include),
                exclude=tuple(entry.exclude),
                recursive=entry.recursive,
                backfill=entry.backfill,
                polling=None if entry.polling in (None, "auto") else entry.polling == "always",
                key=entry,
            )
            for entry in config.watch
        ]
        self.watcher = Watcher(
            specs,
            self._line,
            on_notice=self._notice,
            polling=config.polling,
            poll_s=config.poll_s,
            max_files=config.max_files,
            max_line_bytes=config.max_line_bytes,
            from_start=self._is_table,
        )
        self._tables: set[Path] = set()
        self.slurm: SlurmSource | None = None
        if config.slurm.wanted():
            self.slurm = SlurmSource(
                self._deliver,
                user=config.user,
                redactor=self.redactor,
                tz=self.tz,
                interval_s=config.slurm.interval_s,
                lookback=config.slurm.lookback,
                clock=clock,
                give_up_after=3 if config.slurm.poll == "auto" else None,
            )
        self.processes: ProcessWatcher | None = None
        if config.processes.patterns:
            self.processes = ProcessWatcher(
                config.processes.patterns,
                self._deliver,
                user=config.user,
                interval_s=config.processes.interval_s,
                source=process_source,
                only_own=not config.processes.all_users,
                redactor=self.redactor,
                clock=clock,
            )

    def _expand(self, text: str) -> Path:
        if text == "~" or text.startswith("~/"):
            return self._home / text[2:]
        return Path(text).expanduser().absolute()

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self._since = self.clock()
        for path, (spec, _) in self._prime_candidates().items():
            self._prime(path, spec)
        self.watcher.start()
        if self.processes is not None:
            self.processes.start()
        if self.slurm is not None:
            self.slurm.start()

    def stop(self) -> None:
        if self.slurm is not None:
            self.slurm.stop()
        if self.processes is not None:
            self.processes.stop()
        self.watcher.stop()

    def debouncer(self, **kwargs: Any) -> Debouncer:
        """A debouncer that knows this config's strong cues."""
        return Debouncer(strong_cues=self.strong_cues, **kwargs)

    # -- lines to events -----------------------------------------------------------------

    def _is_table(self, spec: WatchSpec, path: Path) -> bool:
        """A Slurm job table is read whole from its start, as a baseline (snapshot.py)."""
        entry: WatchEntry = spec.key
        if is_job_table(path, entry.parser, sacct_fields=bool(entry.sacct_fields)):
            self._tables.add(path)
            return True
        return False

    def stream(self, spec: WatchSpec, path: Path) -> _Stream:
        stream = self._streams.get(path)
        if stream is None:
            entry: WatchEntry = spec.key
            since = None if spec.backfill else self._since
            parser = make_parser(
                entry.parser,
                path,
                user=self.config.user,
                matcher=self.matcher,
                redactor=self.redactor,
                tz=self.tz,
                launch_patterns=self.config.processes.patterns,
                since=since,
                t0=entry.t0,
                sacct_fields=entry.sacct_fields,
                baseline=path in self._tables or spec.backfill,
                script_base=self._home,
            )
            stream = self._streams[path] = _Stream(parser, source_label(path, self._home))
        return stream

    def _line(self, spec: WatchSpec, path: Path, text: str) -> None:
        stream = self.stream(spec, path)
        line = stream.guard.feed(text)
        for event in stream.parser.parse(line, source=stream.label, now=self.clock()):
            self._deliver(event)

    def _notice(self, spec: WatchSpec, path: Path, what: str) -> None:
        stream = self.stream(spec, path)
        if what == REWOUND:
            stream.guard.reset()
            stream.parser.rewound(source=stream.label, now=self.clock())
        elif what == CAUGHT_UP:
            for event in stream.parser.caught_up(source=stream.label, now=self.clock()):
                self._deliver(event)
            self._check_recognized(stream)

    def _check_recognized(self, stream: _Stream) -> None:
        """A file none of whose lines (at least UNRECOGNIZED_AFTER) meant anything is
        said once: its log line, `unrecognized` in stats and the `on_unrecognized` hook."""
        stats = stream.parser.stats
        if stream.label in self.unrecognized or stats.events:
            return
        if stats.lines >= UNRECOGNIZED_AFTER and stats.unknown == stats.lines:
            self.unrecognized.append(stream.label)
            log.warning(
                "%s: no line of it is understood (parser %s); `jitgpu agent inspect` shows "
                "what is read from it",
                stream.label,
                stream.parser.name,
            )
            if self.on_unrecognized is not None:
                self.on_unrecognized(stream.label)

    def _deliver(self, event: Event) -> None:
        with self._lock:
            self.events += 1
            try:
                self.on_event(event)
            except Exception:
                self.callback_errors += 1
                log.exception("event callback failed")

    def _prime_candidates(self) -> dict[Path, tuple[WatchSpec, None]]:
        out: dict[Path, tuple[WatchSpec, None]] = {}
        for spec in self.watcher.specs:
            entry: WatchEntry = spec.key
            if spec.backfill or not spec.path.is_file():
                continue
            if entry.parser == "shell_history" or (
                entry.parser == "auto" and kind_for_path(spec.path) == "shell_history"
            ):
                out[spec.path] = (spec, None)
        return out

    def _prime(self, path: Path, spec: WatchSpec) -> None:
        """A shell history is read from its end, but shells rewrite the whole file: tell the
        parser what is there now, so that a rewrite does not report it again."""
        parser = self.stream(spec, path).parser
        if not isinstance(parser, ShellHistoryParser):
            return
        try:
            with open(path, "rb") as handle:
                size = handle.seek(0, 2)
                handle.seek(max(0, size - PRIME_BYTES))
                data = handle.read(PRIME_BYTES)
        except OSError:
            return
        lines = data.decode("utf-8", "replace").splitlines()
        if size > PRIME_BYTES and lines:
            lines = lines[1:]  # the first may be the tail of a longer line
        parser.prime(lines, now=self.clock())

    # -- status --------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters for the agent's status output."""
        tail = self.watcher.tail_stats()
        per_source = {}
        totals = {"lines": 0, "events": 0, "unknown": 0, "errors": 0}
        for stream in list(self._streams.values()):
            parsed = stream.parser.stats.as_dict()
            per_source[stream.label] = {"parser": stream.parser.name, **parsed}
            for key in totals:
                totals[key] += parsed[key]
        procs = self.processes
        return {
            "events": self.events,
            "lines_read": tail.lines,
            "lines_cut": tail.cut,
            "bytes_read": tail.bytes,
            "unknown_lines": totals["unknown"],
            "parser_errors": totals["errors"],
            "callback_errors": self.callback_errors,
            "files": self.watcher.stats.files,
            "files_skipped": self.watcher.stats.files_skipped,
            "rotations": tail.rotations,
            "truncations": tail.truncations,
            "observer": self.watcher.stats.observer,
            "redactions": dict(self.redactor.hits),
            "processes": None
            if procs is None
            else {
                "scans": procs.scans,
                "tracked": len(procs.tracked),
                "events": procs.events,
                "errors": procs.errors,
            },
            "sources": per_source,
            "unrecognized": list(self.unrecognized),
            "slurm": None
            if self.slurm is None
            else {
                "mode": self.slurm.mode,
                "polls": self.slurm.polls,
                "events": self.slurm.events,
                "errors": self.slurm.errors,
            },
        }
