"""Prompt files: where they are found, version checks, and the fenced rendering of a context."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pred_llm_helpers import INJECTION, NOW, config, context

import predictors
from predictors.llm_schema import answer_schema, parse_answer
from predictors.prompting import (
    FENCE_CLOSE,
    FENCE_OPEN,
    PromptError,
    candidate_dirs,
    context_data,
    fence,
    find_prompts_dir,
    load_prompt,
    render_messages,
    sanitize_text,
)

PACKAGE = Path(predictors.__file__).resolve().parent
SOURCE_PROMPTS = PACKAGE.parent / "prompts"


def test_schema_file_matches_the_answer_model() -> None:
    on_disk = json.loads((SOURCE_PROMPTS / "forecast" / "v1.schema.json").read_text())
    assert on_disk == answer_schema()


def test_source_tree_prompts_are_found_and_loaded() -> None:
    assert find_prompts_dir() in candidate_dirs()
    template = load_prompt("forecast/v1")
    assert template.id == "forecast/v1"
    system = template.system_text(config(max_gpus=32, max_forecasts=3))
    assert "never more\n  than 32." in system and "at most 3." in system
    schema = json.dumps(answer_schema(), separators=(",", ":"))
    assert schema in system
    assert "$" not in system.replace(schema, "")  # every placeholder filled
    user = template.user_text("DATA")
    assert "DATA" in user and "$" not in user


def test_installed_layout_finds_predictors_prompts(tmp_path: Path) -> None:
    # A wheel installs <repo>/prompts as predictors/prompts: rebuild that layout and load.
    site = tmp_path / "site"
    shutil.copytree(PACKAGE, site / "predictors", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(SOURCE_PROMPTS, site / "predictors" / "prompts")
    code = (
        "from predictors.prompting import find_prompts_dir, load_prompt\n"
        "print(find_prompts_dir()); print(load_prompt('forecast/v1').id)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert out == [str(site / "predictors" / "prompts"), "forecast/v1"]


def test_explicit_folder_and_its_errors(tmp_path: Path) -> None:
    with pytest.raises(PromptError):
        find_prompts_dir(tmp_path / "missing")
    shutil.copytree(SOURCE_PROMPTS, tmp_path / "p")
    assert load_prompt("forecast/v1", tmp_path / "p").id == "forecast/v1"
    with pytest.raises(PromptError, match="missing"):
        load_prompt("forecast/v9", tmp_path / "p")
    with pytest.raises(PromptError):
        load_prompt("forecast", tmp_path / "p")


def test_a_version_whose_schema_drifted_is_refused(tmp_path: Path) -> None:
    shutil.copytree(SOURCE_PROMPTS, tmp_path / "p")
    schema_file = tmp_path / "p" / "forecast" / "v1.schema.json"
    schema = json.loads(schema_file.read_text())
    schema["properties"]["reserve_everything"] = {"type": "boolean"}
    schema_file.write_text(json.dumps(schema))
    with pytest.raises(PromptError, match="differs"):
        load_prompt("forecast/v1", tmp_path / "p")


def test_unknown_placeholder_fails_at_load(tmp_path: Path) -> None:
    shutil.copytree(SOURCE_PROMPTS, tmp_path / "p")
    system = tmp_path / "p" / "forecast" / "v1.system.md"
    system.write_text(system.read_text() + "\n$unknown_thing\n")
    with pytest.raises(KeyError):
        load_prompt("forecast/v1", tmp_path / "p")


def test_fence_cannot_be_closed_from_inside() -> None:
    text = fence({"excerpt": INJECTION, "x": "<b>&"})
    assert text.count(FENCE_OPEN) == 1 and text.count(FENCE_CLOSE) == 1
    inside = text[len(FENCE_OPEN) : -len(FENCE_CLOSE)]
    assert "<" not in inside and ">" not in inside
    assert json.loads(inside)["excerpt"] == INJECTION


def test_sanitize_strips_controls_and_bounds_length() -> None:
    assert sanitize_text("a\tb\nc\x00d\u202ee", 100) == "a b cde"
    assert sanitize_text("x" * 50, 10) == "xxxxxxx..."
    assert len(sanitize_text("y" * 500, 200)) == 200


def test_context_data_is_compact_and_bounded() -> None:
    ctx = context("secret-free excerpt " * 50)
    data = context_data(ctx, NOW, config(max_excerpt_chars=40, max_events=2))
    assert len(data["recent_events"]) == 2
    [cue] = [e for e in data["recent_events"] if e["kind"] == "cue"]
    assert cue["cue"] == "preprocessing_done" and len(cue["excerpt"]) == 40
    assert cue["seconds_ago"] == 60
    history = data["history"]
    assert history["jobs_seen"] == 1 and history["gpus_largest_job"] == 8
    assert history["seconds_since_last_finish"] == 1000
    assert data["now"] == {"local_time": "02:46", "weekday": "Monday"}
    assert "alice" not in json.dumps(data)  # the model needs no names
    no_excerpts = context_data(ctx, NOW, config(max_excerpt_chars=0))
    assert all("excerpt" not in e for e in no_excerpts["recent_events"])


def test_render_messages_roles() -> None:
    template = load_prompt("forecast/v1")
    messages = render_messages(template, context(), NOW, config())
    assert [m["role"] for m in messages] == ["system", "user"]
    assert FENCE_OPEN in messages[1]["content"]


def test_parse_answer_extracts_and_validates() -> None:
    assert parse_answer('Here:\n{"forecasts": []}\nDone.').forecasts == []
    with pytest.raises(ValueError):
        parse_answer("no json here")
    with pytest.raises(ValueError):
        parse_answer('{"forecasts": [{"start_in_s": -1}]}')
