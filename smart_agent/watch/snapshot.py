"""Job tables saved as snapshots (`sacct > file`, `watch squeue > file`, cron): read whole from
their start as a baseline, then every rewrite read again and diffed by job id and state."""

from __future__ import annotations

from pathlib import Path

from smart_agent.parsers.auto import kind_for_path, sniff_kind

TABLE_KINDS = frozenset({"sacct", "squeue"})
SNIFF_BYTES = 4096


def first_line(path: Path) -> str:
    """The first non-blank line of a file ('' when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(SNIFF_BYTES)
    except OSError:
        return ""
    for line in data.decode("utf-8", "replace").splitlines():
        if line.strip():
            return line
    return ""


def is_job_table(path: Path, parser: str, *, sacct_fields: bool = False) -> bool:
    """Whether `path` holds a Slurm job table: by the configured parser, its name, or its
    first line. Such a file is read from its start (not its end): its rows are the state
    of jobs, not a stream of new lines, and a header must be seen to read them. The parser
    reads that first pass as a baseline (no arrivals stamped with the read time) and the
    tailer reports a rewrite in place as one (see FileTailer), so each later snapshot is
    diffed against what is known of each job."""
    if parser in TABLE_KINDS:
        return True
    if parser != "auto":
        return False
    if kind_for_path(path) in TABLE_KINDS:
        return True
    return sniff_kind(first_line(path), sacct_fields=sacct_fields) in TABLE_KINDS
