"""YAML config loading whose errors name the file, line, key, value and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)
KeyPath = tuple[str | int, ...]


class ConfigError(ValueError):
    """A config file is wrong; `str()` is one line per problem, ready to show a person."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def _lines(node: yaml.Node, path: KeyPath, out: dict[KeyPath, int]) -> None:
    """Record the line of every key (and list item) below `node`."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = (*path, key.value if isinstance(key, yaml.ScalarNode) else str(key))
            out[child] = key.start_mark.line + 1
            _lines(value, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out[(*path, i)] = item.start_mark.line + 1
            _lines(item, (*path, i), out)


def read_yaml(path: Path) -> tuple[dict[str, Any], dict[KeyPath, int]]:
    """The document as a mapping, and the line of every key path in it."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from None
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{path}{where}: not valid YAML: {problem}"]) from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}:1: the top level must be a mapping of keys to values"])
    lines: dict[KeyPath, int] = {}
    if node is not None:
        _lines(node, (), lines)
    return data, lines


def _allowed(model: type[BaseModel], loc: KeyPath) -> str | None:
    """The keys allowed where `loc` points, for unknown-key errors."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return None
        annotation = fields[part].annotation
        current = _model_in(annotation)
        if current is None:
            return None
    fields = getattr(current, "model_fields", None)
    return ", ".join(sorted(fields)) if fields else None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def describe(
    exc: ValidationError, path: Path | str, lines: dict[KeyPath, int], model: type[BaseModel]
) -> list[str]:
    problems = []
    for error in exc.errors():
        loc: KeyPath = tuple(p for p in error["loc"] if not (isinstance(p, str) and "[" in p))
        key = ".".join(str(p) for p in loc) or "(top level)"
        line = next((lines[loc[:n]] for n in range(len(loc), -1, -1) if loc[:n] in lines), None)
        where = f"{path}:{line}" if line else str(path)
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            allowed = _allowed(model, loc)
            message = "unknown key" + (f"; allowed keys here: {allowed}" if allowed else "")
            problems.append(f"{where}: key {key!r}: {message}")
            continue
        value = error.get("input")
        shown = repr(value) if not isinstance(value, dict | list) else type(value).__name__
        problems.append(f"{where}: key {key!r}: {message} (got {shown})")
    return sorted(problems, key=_line_of)


def _line_of(problem: str) -> int:
    head = problem.split(": ", 1)[0]
    tail = head.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def load_model(model: type[M], path: Path | str) -> M:
    """Validate the YAML file at `path` as `model`, or raise ConfigError naming each problem."""
    path = Path(path).expanduser()
    data, lines = read_yaml(path)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe(exc, path, lines, model)) from None
