"""The design's import rules, checked on every module's import statements."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = ("control_plane", "smart_agent", "predictors")
# What the pure scheduling core may import: no clock, no I/O, no randomness.
CORE_STDLIB = {
    "__future__",
    "bisect",
    "collections",
    "dataclasses",
    "enum",
    "functools",
    "heapq",
    "itertools",
    "math",
    "operator",
    "re",
    "typing",
}


def _absolute(node: ast.ImportFrom, path: Path) -> str:
    """The module an import names, relative ones resolved against the file's package."""
    if node.level == 0:
        return node.module or ""
    package = list(path.relative_to(REPO).with_suffix("").parts)[: -node.level]
    return ".".join([*package, *([node.module] if node.module else [])])


def _imports(path: Path, tree: ast.AST | None = None) -> Iterator[str]:
    for node in ast.walk(tree or ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            yield _absolute(node, path)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def _module_level(tree: ast.Module) -> ast.Module:
    """The module without its function and class bodies: what runs on import."""

    class Strip(ast.NodeTransformer):
        def visit_FunctionDef(self, node: ast.AST) -> None:
            return None

        visit_AsyncFunctionDef = visit_FunctionDef
        visit_ClassDef = visit_FunctionDef

    return Strip().visit(tree)


def _modules(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


def _ours(name: str) -> bool:
    return name.split(".")[0] in OURS


def _within(name: str, *allowed: str) -> bool:
    return any(name == a or name.startswith(a + ".") for a in allowed)


def _breaches(folder: str, allowed: tuple[str, ...], skip: tuple[str, ...] = ()) -> list[str]:
    found = []
    for path in _modules(folder):
        rel = path.relative_to(REPO).as_posix()
        if rel in skip:
            continue
        found += [f"{rel}: {n}" for n in _imports(path) if _ours(n) and not _within(n, *allowed)]
    return found


def test_relative_imports_are_resolved() -> None:
    node = ast.parse("from ..db import models").body[0]
    assert isinstance(node, ast.ImportFrom)
    assert _absolute(node, REPO / "control_plane/node_agent/agent.py") == "control_plane.db"


def test_the_rules_see_the_code() -> None:
    # A rule over no files would pass whatever the code does.
    for folder in ("control_plane/scheduling", "predictors", "smart_agent", "control_plane/db"):
        assert len(_modules(folder)) >= 3, folder
    assert "control_plane.schemas.enums" in set(
        _imports(REPO / "control_plane/scheduling/quotas.py")
    )


def test_the_scheduling_core_does_no_io_and_reads_no_clock() -> None:
    found = []
    for path in _modules("control_plane/scheduling"):
        for name in _imports(path):
            if _ours(name):
                ok = _within(name, "control_plane.scheduling", "control_plane.schemas")
            else:
                ok = name.split(".")[0] in CORE_STDLIB
            if not ok:
                found.append(f"{path.name}: {name}")
    assert found == []


@pytest.mark.parametrize(
    ("folder", "allowed", "skip"),
    [
        # predictors imports none of our other packages.
        ("predictors", ("predictors",), ()),
        # The wire contract stands alone.
        ("control_plane/schemas", ("control_plane.schemas",), ()),
        # db -> schemas; never up to services, api or jobs.
        ("control_plane/db", ("control_plane.db", "control_plane.schemas"), ()),
        # services -> scheduling, db, schemas (and the metrics they record).
        (
            "control_plane/services",
            (
                "control_plane.services",
                "control_plane.scheduling",
                "control_plane.db",
                "control_plane.schemas",
                "control_plane.metrics",
            ),
            (),
        ),
        # jobs -> services (never the API).
        (
            "control_plane/jobs",
            (
                "control_plane.jobs",
                "control_plane.services",
                "control_plane.db",
                "control_plane.schemas",
                "control_plane.config",
            ),
            (),
        ),
        # The node agent talks HTTP: of the control plane it knows only the wire contract.
        ("control_plane/node_agent", ("control_plane.node_agent", "control_plane.schemas"), ()),
        # So does the Slurm bridge (a node agent for a whole cluster), reusing its client.
        (
            "control_plane/slurm_bridge",
            ("control_plane.slurm_bridge", "control_plane.schemas", "control_plane.node_agent"),
            (),
        ),
        # So does the smart agent; the `jitgpu` entry point alone starts the other pieces
        # (server, node agent, replay), each inside its own command.
        (
            "smart_agent",
            ("smart_agent", "control_plane.schemas", "predictors"),
            ("smart_agent/cli/main.py",),
        ),
        # The replay drives the core with predictors, without HTTP or a database.
        (
            "control_plane/replay",
            (
                "control_plane.replay",
                "control_plane.scheduling",
                "control_plane.schemas",
                "predictors",
            ),
            (),
        ),
    ],
)
def test_imports_point_one_way(
    folder: str, allowed: tuple[str, ...], skip: tuple[str, ...]
) -> None:
    assert _breaches(folder, allowed, skip) == []


def test_the_entry_point_imports_the_control_plane_only_inside_commands() -> None:
    # Top-level imports of the server side would load it (and its database drivers) for every
    # `jitgpu agent` or `jitgpu predictions` call on a user's machine.
    path = REPO / "smart_agent/cli/main.py"
    loaded = set(_imports(path, _module_level(ast.parse(path.read_text()))))
    everything = set(_imports(path))
    assert any(_within(n, "control_plane.serve") for n in everything)  # inside a command
    assert not [n for n in loaded if _within(n, "control_plane") and "schemas" not in n]
