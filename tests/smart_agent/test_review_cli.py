"""`jitgpu predictions ...` through typer's runner: output, JSON, files, and one-line errors."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from smart_agent.cli.predictions import predictions_app
from tests.smart_agent.review_helpers import INJECTION, hand_made_log

runner = CliRunner()


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    path = tmp_path_factory.mktemp("review") / "predictions.db"
    return path, hand_made_log(path)


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = runner.invoke(predictions_app, list(args), env=env)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def test_list_as_json_with_filters(logged: tuple[Path, dict[str, int]]) -> None:
    path, ids = logged
    code, out = run("list", "--log", str(path), "--outcome", "claimed", "--json", "--utc")
    assert code == 0, out
    rows = json.loads(out)
    assert [r["id"] for r in rows] == [ids["c6_acted"], ids["c1_acted"]]  # newest first
    assert rows[1]["made_at_iso"] == "2026-03-02T09:00:00+00:00"
    code, out = run(
        "list", "--log", str(path), "--predictor", "burst", "--cue", "epoch_end", "--json"
    )
    assert [r["id"] for r in json.loads(out)] == [ids["c4_burst"]]
    code, out = run(
        "list", "--log", str(path), "--since", "2026-03-09", "--until", "2026-03-09T10:00",
        "--utc", "--decision", "accepted", "--json",
    )  # fmt: skip
    assert [r["id"] for r in json.loads(out)] == [ids["c6_acted"], ids["c5_acted"]]


def test_list_table(logged: tuple[Path, dict[str, int]]) -> None:
    code, out = run("list", "--log", str(logged[0]), "--limit", "4", "--utc")
    assert code == 0, out
    assert "forecasts (4, newest first, UTC)" in out
    assert "accepted/pending" in out and "03-09 10:23" in out
    assert "03-02" not in out  # only the newest four


def test_the_log_can_come_from_the_environment(logged: tuple[Path, dict[str, int]]) -> None:
    code, out = run("list", "--json", env={"JITGPU_PREDICTION_LOG": str(logged[0])})
    assert code == 0 and len(json.loads(out)) == 18


def test_missing_log_is_one_line_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "no.db"
    for command in ("list", "score", "export --out x.csv", f"report --out {tmp_path}/r.html"):
        code, out = run(*command.split(), "--log", str(missing))
        assert code == 1
        assert out == f"error: prediction log not found: {missing}\n"


def test_bad_option_values_name_the_option_and_the_allowed_ones(
    logged: tuple[Path, dict[str, int]],
) -> None:
    path = str(logged[0])
    code, out = run("list", "--log", path, "--outcome", "won")
    assert code == 2
    assert "--outcome 'won': allowed values are pending, claimed, expired" in out
    code, out = run("score", "--log", path, "--since", "last tuesday")
    assert code == 2 and "--since 'last tuesday': allowed values are an ISO date" in out
    code, out = run("export", "--log", path, "--out", "x.txt")
    assert code == 2 and "--format '(none)': allowed values are csv, jsonl" in out
    code, out = run("export", "--log", path, "--out", "x.csv", "--table", "all")
    assert code == 2 and "--table 'all'" in out


def test_show_prints_log_text_verbatim(logged: tuple[Path, dict[str, int]]) -> None:
    path, ids = logged
    code, out = run("show", str(ids["c1_acted"]), "--log", str(path), "--utc")
    assert code == 0, out
    # Rich markup in the log is text, not styling.
    assert "[red]markup[/red]" in out and "<script>" in out
    for expected in (
        "#1 (cue)",
        "preprocessing_done",
        "h1 (2 GPUs)",
        "claimed at 2026-03-02T09:10:00+00:00",
        "10m00s",
        "18.0",
        "warm",
        "context the predictors saw (redacted):",
        '"excerpt": "<script>',
    ):
        assert expected in out, expected
    code, out = run("show", str(ids["c2_llm"]), "--log", str(path), "--json")
    data = json.loads(out)
    assert data["forecast"]["prompt_version"] == "v3"
    assert (data["forecast"]["prompt_tokens"], data["forecast"]["usd"]) == (1500, 0.02)
    assert data["cycle"]["trigger"] == "timer" and data["job"] is None
    code, out = run("show", "9999", "--log", str(path))
    assert code == 1 and out == "error: no forecast with id 9999 in the prediction log\n"


def test_score_json_and_table(logged: tuple[Path, dict[str, int]]) -> None:
    path = str(logged[0])
    code, out = run("score", "--log", path, "--utc", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert [w["period"] for w in data["weeks"]] == ["2026-W10", "2026-W11"]
    assert data["baseline"] == "burst" and data["time_to_gpu"]["cold_median_s"] == 100.0
    acted = next(x for x in data["all"]["lines"] if x["role"] == "acted")
    assert (acted["holds"], acted["claimed"], acted["jobs"], acted["covered"]) == (4, 2, 5, 2)
    assert acted["outcomes"]["pending"] == 1
    code, out = run("score", "--log", path, "--utc", "--predictor", "llm")
    assert code == 0, out
    assert "shadow: burst *" in out and "shadow: llm" in out and "ensemble" not in out
    assert "compared with the baseline (burst in shadow)" in out
    assert "2026-W10" in out and "all weeks" in out and "25m50s" in out
    assert "time-to-GPU saved = for each warm job" in " ".join(out.split())


def test_report_writes_one_file(logged: tuple[Path, dict[str, int]], tmp_path: Path) -> None:
    out_file = tmp_path / "report.html"
    code, out = run("report", "--log", str(logged[0]), "--out", str(out_file), "--utc")
    assert code == 0, out
    assert out.startswith(f"wrote {out_file} (18 forecasts, 6 jobs)")
    html = out_file.read_text()
    assert "<svg" in html and INJECTION not in html
    code, out = run("report", "--log", str(logged[0]), "--out", str(tmp_path / "no" / "r.html"))
    assert code == 1 and out.startswith("error: cannot write")


def test_export_files_and_stdout(logged: tuple[Path, dict[str, int]], tmp_path: Path) -> None:
    path = str(logged[0])
    target = tmp_path / "jobs.csv"
    code, out = run("export", "--log", path, "--out", str(target), "--table", "jobs")
    assert code == 0 and out == f"wrote 6 rows to {target}\n"
    assert [r["job_ref"] for r in csv.DictReader(target.open())] == [f"j{i}" for i in range(1, 7)]
    code, out = run(
        "export", "--log", path, "--out", "-", "--format", "jsonl", "--outcome", "expired"
    )
    assert code == 0
    assert [json.loads(x)["hold_id"] for x in out.splitlines()] == ["h2"]


def test_the_review_loads_no_llm_library() -> None:
    # `jitgpu predictions` must start fast on a laptop: litellm is for the agent only.
    code = "import sys, smart_agent.cli.predictions; sys.exit('litellm' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
