"""Every command block of README.md and docs/*.md runs, in order, as a reader would type it.

Each file's blocks run in one bash, in a fresh folder whose HOME is empty, with no JITGPU_*
variable and no virtual environment on PATH: only what the text says to do. The folder holds
the checkout's `.venv` and a copy of `configs/` (what a clone has after `make`). Port 8080 is
replaced by a free port everywhere (in the commands, the configs, and as JITGPU_SERVER for
the client's default), so that the test runs beside a real server. A block marked
`<!-- docs-test: output -->` is what the command block before it prints (standard output),
compared after ids, keys, clock times and the port are masked. A command block that cannot
run here is marked `<!-- docs-test: skip REASON -->` in the Markdown; nothing is skipped
silently: an unmarked command block the runner does not run fails the first test.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.docs.mdblocks import REPO, SHELL, Block, blocks, commands, doc_files
from tests.support.pg import free_port

pytestmark = pytest.mark.e2e

MASKS = (
    (re.compile(r"\b(alloc|hold|tnt|node|key)_[0-9a-f]{16}\b"), r"\1_<id>"),
    (re.compile(r"\bjg[a-z]_[A-Za-z0-9_-]{20,}"), "<key>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\b"), "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\d\b"), "<time>"),
)


def _all_blocks() -> list[Block]:
    return [b for path in doc_files() for b in blocks(path)]


def test_every_command_block_runs_or_says_why_not() -> None:
    problems = []
    for block in _all_blocks():
        if block.mark == "skip" and not block.reason:
            problems.append(f"{block.where}: a skip mark needs a reason")
        if block.is_command and block.mark is None and block.lang not in SHELL:
            problems.append(
                f"{block.where}: a command block without a language: tag it ```sh to have "
                "it run, or mark it <!-- docs-test: skip REASON -->"
            )
    assert problems == [], "\n".join(problems)


def _mask(text: str, port: int, home: Path, *, ids: bool = True) -> str:
    text = text.replace(str(home), "~").replace(str(port), "8080")
    for pattern, repl in MASKS if ids else ():
        text = pattern.sub(repl, text)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def _script(runnable: list[Block], port: int, out: Path) -> str:
    """One bash script: each block's commands, its stdout and stderr to files of its own, and
    any command's failure noted (a background command counts when it is started)."""
    lines = [
        "set -o pipefail",
        "trap 'kill $(jobs -p) 2>/dev/null' EXIT",
        ": > " + str(out / "failed"),
    ]
    for n, block in enumerate(runnable):
        lines.append(f"exec 1>{out / f'{n}.out'} 2>{out / f'{n}.err'}")
        for k, command in enumerate(commands(block.text)):
            command = command.replace("8080", str(port))
            lines.append(command)
            note = f"{block.where} command {k + 1}: status "
            lines.append(f"rc=$?; [ $rc = 0 ] || echo '{note}'$rc >> {out / 'failed'}")
    return "\n".join(lines) + "\n"


def _environment(home: Path, port: int) -> dict[str, str]:
    keep = {
        k: v for k, v in os.environ.items() if not k.startswith(("JITGPU_", "XDG_", "VIRTUAL_ENV"))
    }
    # No virtual environment on PATH: the text must say how `jitgpu` is found.
    path = [
        p for p in keep.get("PATH", "").split(os.pathsep) if not (Path(p) / "activate").exists()
    ]
    keep.update(HOME=str(home), PATH=os.pathsep.join(path), COLUMNS="80", NO_COLOR="1", TERM="dumb")
    keep.pop("PYTHONPATH", None)
    keep["JITGPU_SERVER"] = f"http://127.0.0.1:{port}"  # the default URL, at the free port
    return keep


def _folder(tmp_path: Path, port: int) -> tuple[Path, Path]:
    work = tmp_path / "clone"
    work.mkdir()
    (work / ".venv").symlink_to(REPO / ".venv")
    shutil.copytree(REPO / "configs", work / "configs")
    for config in (work / "configs").glob("*.yaml"):
        config.write_text(config.read_text().replace("8080", str(port)))
    home = tmp_path / "home"
    home.mkdir()
    return work, home


def _runnable(found: list[Block]) -> list[Block]:
    return [b for b in found if b.lang in SHELL and b.mark is None]


# Files with a command block to run; the others have none, or only marked ones (see above).
RUNNABLE = [p.relative_to(REPO).as_posix() for p in doc_files() if _runnable(blocks(p))]


@pytest.mark.parametrize("doc", RUNNABLE)
def test_the_commands_of(doc: str, tmp_path: Path) -> None:
    found = blocks(REPO / doc)
    runnable = _runnable(found)
    port = free_port()
    work, home = _folder(tmp_path, port)
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "script.sh"
    script.write_text(_script(runnable, port, out))
    proc = subprocess.Popen(
        ["bash", str(script)], cwd=work, env=_environment(home, port), start_new_session=True
    )
    try:
        proc.wait(timeout=240)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        else:
            # The script's own background jobs were ended by its trap; anything left of ours goes.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)

    def shown(n: int) -> str:
        err = (out / f"{n}.err").read_text(errors="replace")[-3000:]
        return f"stdout:\n{(out / f'{n}.out').read_text(errors='replace')}\nstderr:\n{err}"

    failed = (out / "failed").read_text().strip()
    assert not failed, failed + "\n" + "\n".join(shown(n) for n in range(len(runnable)))
    wrong = []
    for n, block in enumerate(runnable):
        after = found[found.index(block) + 1] if found.index(block) + 1 < len(found) else None
        if after is None or after.mark != "output":
            continue
        printed = (out / f"{n}.out").read_text(errors="replace")
        if _mask(printed, port, home) != _mask(after.text, port, home):
            wrong.append((after, printed))
    if wrong and os.environ.get("JITGPU_DOCS_UPDATE") == "1":
        _rewrite(REPO / doc, [(a, _mask(p, port, home, ids=False)) for a, p in wrong])
    assert not wrong, "\n".join(
        f"{a.where} says otherwise than what was printed:\n{p}" for a, p in wrong
    )


def _rewrite(path: Path, fixes: list[tuple[Block, str]]) -> None:
    """JITGPU_DOCS_UPDATE=1: write what was printed into the output blocks (port and home
    as the text has them), for a person to read in the diff before committing."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for block, printed in sorted(fixes, key=lambda f: -f[0].line):
        end = block.line + len(block.text.splitlines())
        lines[block.line : end] = printed.splitlines()
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
