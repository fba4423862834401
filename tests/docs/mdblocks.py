"""Fenced blocks of the Markdown docs: which are commands to type, which are skipped and why,
and which show the output of the block before them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHELL = ("sh", "bash", "shell", "console")
# An untagged block whose first line starts like this is a command a reader would type.
LOOKS_TYPED = re.compile(r"^(\$ |jitgpu |\.venv/|python3? |make |export |curl |[A-Z_]+=\S* )")
MARK = re.compile(r"^<!--\s*docs-test:\s*(skip|output)\b(.*?)-->\s*$")


@dataclass
class Block:
    file: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    mark: str | None = None  # "skip" or "output", from the comment just above the fence
    reason: str = ""

    @property
    def where(self) -> str:
        return f"{self.file.relative_to(REPO)}:{self.line}"

    @property
    def is_command(self) -> bool:
        if self.lang in SHELL:
            return True
        first = next((ln for ln in self.text.splitlines() if ln.strip()), "")
        return self.lang == "" and bool(LOOKS_TYPED.match(first))


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a file, with the docs-test mark on the line before it."""
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(```+)\s*([\w-]*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith(fence.group(1)):
            body.append(lines[i])
            i += 1
        above = lines[start - 1].strip() if start else ""
        mark = MARK.match(above)
        out.append(
            Block(
                path,
                start + 1,
                fence.group(2),
                "\n".join(body) + "\n",
                mark.group(1) if mark else None,
                mark.group(2).strip() if mark else "",
            )
        )
        i += 1
    return out


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def commands(text: str) -> list[str]:
    """Logical command lines: continuation lines joined, blank and comment lines dropped."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = pending + raw
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        if line.strip() and not line.lstrip().startswith("#"):
            out.append(line)
    return out
