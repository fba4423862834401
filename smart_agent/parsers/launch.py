"""GPUs a job asks for where people write them: launcher flags on a command line, and the
`#SBATCH` lines of the script an `sbatch` command names (read locally, never sent)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

_DS_INCLUDE = re.compile(r"\bdeepspeed\b.*?--include[= ](?P<spec>\S+)")
_SBATCH = re.compile(r"(?:^|[\s;&|(])(?:\S*/)?sbatch\s+(?P<args>.*)$")
_SBATCH_LINE = re.compile(r"^#SBATCH\s+(?P<opts>.*)$")
# sbatch options that take a value as the next word (short forms and common long ones).
_TAKES_VALUE = frozenset(
    (
        *("-A", "-p", "-J", "-t", "-N", "-n", "-c", "-o", "-e", "-D", "-w", "-x", "-C"),
        *("-q", "-G", "-d", "-a", "-M", "-L", "-F", "--account", "--partition", "--job-name"),
        *("--time", "--nodes", "--ntasks", "--cpus-per-task", "--output", "--error"),
        *("--chdir", "--nodelist", "--exclude", "--constraint", "--qos", "--gpus"),
        *("--dependency", "--array", "--mem", "--gres", "--gpus-per-node", "--gpus-per-task"),
        *("--export", "--mail-type", "--mail-user"),
    )
)
SCRIPT_BYTES = 64 * 1024


def deepspeed_include(command: str) -> int | None:
    """GPUs in `deepspeed --include host:0,1@host2:0,1` (None without --include)."""
    found = _DS_INCLUDE.search(command)
    if found is None:
        return None
    total = 0
    for part in found.group("spec").strip("'\"").split("@"):
        devices = part.split(":", 1)[1] if ":" in part else ""
        total += len([d for d in devices.split(",") if d.strip().isdigit()])
    return total or None


def sbatch_script(command: str) -> str | None:
    """The script an `sbatch` command line submits (None for `--wrap` or none given)."""
    found = _SBATCH.search(command)
    if found is None or "--wrap" in command:
        return None
    try:
        words = shlex.split(found.group("args"))
    except ValueError:
        words = found.group("args").split()
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word in ("&&", "||", ";", "|", "&"):
            return None
        if word.startswith("-"):
            skip = word in _TAKES_VALUE
            continue
        return word
    return None


def script_options(path: Path) -> str:
    """The options of a batch script's `#SBATCH` lines, joined (the lines before its first
    command, as sbatch reads them); '' when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            text = handle.read(SCRIPT_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""
    options = []
    for line in text.splitlines():
        stripped = line.strip()
        found = _SBATCH_LINE.match(stripped)
        if found is not None:
            options.append(found.group("opts").split(" #", 1)[0])
        elif stripped and not stripped.startswith("#"):
            break  # sbatch stops reading options at the first command
    return " ".join(options)


def resolve_script(name: str, base: Path | None) -> Path | None:
    path = Path(name).expanduser()
    if not path.is_absolute():
        if base is None:
            return None
        path = base / path
    return path if path.is_file() else None
