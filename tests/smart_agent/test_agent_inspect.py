"""`jitgpu agent inspect`: what the agent makes of files, as a table or stable JSON, with no
server; unrecognised files said once by the sources and shown by `jitgpu agent status`."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from smart_agent.cli.main import app
from smart_agent.sources import UNRECOGNIZED_AFTER, Sources, SourcesConfig

ROOT = Path(__file__).resolve().parents[1] / "data" / "real-inputs"
runner = CliRunner()


def test_json_is_a_stable_list_of_objects() -> None:
    files = [
        ROOT / "sacct/S05_cancelled_by_gpu_noheader.txt",
        ROOT / "slurm_out/G_local_slurm-9.out",
        ROOT / "nvidia_smi/N01_deepracer_418.txt",
    ]
    result = runner.invoke(
        app,
        ["agent", "inspect", "--format", "json", "--user", "alice", *map(str, files)],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [d["kind"] for d in data] == ["sacct", "plain", "plain"]
    assert [d["recognized"] for d in data] == [True, True, False]
    assert set(data[0]) == {
        "path", "kind", "layout", "recognized", "lines", "unknown_lines", "notes", "events",
        "jobs",
    }  # fmt: skip
    assert data[0]["layout"] == "inferred" and "sacct_fields" in data[0]["notes"][0]
    assert data[0]["jobs"][0]["job_id"] == "48412394" and data[0]["jobs"][0]["gpus"] == 1
    (ended,) = data[1]["events"]
    assert (ended["kind"], ended["cue"], ended["job_id"], ended["line"]) == (
        "job_finished",
        "job_timeout",
        "9",
        2,
    )
    assert ended["at"] == "2026-11-24T17:59:57+00:00" or ended["at"].startswith("2026-11-2")


def test_configured_fields_and_the_redacted_text(tmp_path: Path) -> None:
    path = tmp_path / "jobs.txt"
    path.write_text("77|bob|2026-11-24T17:58:22|RUNNING|gres/gpu:h100=4\n")
    result = runner.invoke(
        app,
        [
            "agent", "inspect", "--format", "json", "--text", "--user", "alice",
            "--sacct-fields", "JobID,User,Submit,State,AllocTRES", str(path),
        ],
    )  # fmt: skip
    (data,) = json.loads(result.stdout)
    assert data["layout"] == "configured" and data["notes"] == []
    # Running, but no Start column: its start time is not stated, so no start event.
    assert [(e["kind"], e["user"], e["gpus"], e["gpu_model"]) for e in data["events"]] == [
        ("job_submitted", "bob", 4, "h100"),
    ]
    assert data["redacted"] == [path.read_text().strip()]


def test_table_output_and_bad_options() -> None:
    sample = str(ROOT / "sacct/G01_local_sacct_default_fixedwidth.txt")
    result = runner.invoke(app, ["agent", "inspect", sample])
    assert result.exit_code == 0 and "sacct (fixed-width), recognized" in result.stdout
    bad = runner.invoke(app, ["agent", "inspect", "--kind", "csv", sample])
    assert bad.exit_code == 2 and "allowed: auto, plain" in bad.output
    missing = runner.invoke(app, ["agent", "inspect", "nope.txt"])
    assert missing.exit_code == 2 and "not a readable file" in missing.output


def test_a_file_nothing_is_read_from_is_said_once(tmp_path: Path) -> None:
    smi = tmp_path / "gpus.txt"
    text = (ROOT / "nvidia_smi/N01_deepracer_418.txt").read_text()
    smi.write_text(text * 2)
    said: list[str] = []
    config = SourcesConfig.model_validate(
        {"user": "alice", "watch": [{"path": str(smi), "backfill": True}], "polling": "always"}
    )
    sources = Sources(config, lambda e: None, on_unrecognized=said.append, home=tmp_path)
    sources.watcher.start(background=False)
    sources.watcher.poll_once()
    with open(smi, "a") as handle:
        handle.write(text)
    sources.watcher.poll_once()
    assert len(text.splitlines()) * 2 >= UNRECOGNIZED_AFTER
    assert said == ["~/gpus.txt"] and sources.stats()["unrecognized"] == ["~/gpus.txt"]


def test_agent_status_lists_the_files_not_recognized(tmp_path: Path) -> None:
    from smart_agent.predlog import PredictionLog
    from smart_agent.runner import UNRECOGNIZED_KEY

    log_path = tmp_path / "p.db"
    (tmp_path / "policy.yaml").write_text("min_confidence: 0.5\n")
    config = tmp_path / "agent.yaml"
    config.write_text(f"user: alice\npolicy: policy.yaml\nprediction_log: {log_path}\n")
    log = PredictionLog(log_path)
    log.set_meta(UNRECOGNIZED_KEY, json.dumps(["~/gpus.txt"]))
    log.close()
    result = runner.invoke(app, ["agent", "status", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "not recognized" in result.stdout and "~/gpus.txt" in result.stdout


def test_a_saved_squeue_snapshot_shows_its_jobs_as_the_baseline() -> None:
    """One snapshot gives no events (its jobs were there before the agent looked): inspect
    shows them, with their states and GPUs, labelled as the baseline, within 80 columns."""
    sample = str(ROOT / "squeue/Q03_tres_per_node_b.txt")
    result = runner.invoke(app, ["agent", "inspect", sample], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 80, result.stdout
    (data,) = json.loads(
        runner.invoke(app, ["agent", "inspect", "--format", "json", sample]).stdout
    )
    assert data["kind"] == "squeue" and data["events"] == []
    assert data["jobs"] and all(job["baseline"] for job in data["jobs"])
    assert f"baseline: {len(data['jobs'])} jobs already there" in result.stdout
    assert "their state, not arrivals" in result.stdout
    for job in data["jobs"]:
        assert job["job_id"] in result.stdout and job["state"] in result.stdout


def test_a_squeue_sequence_shows_the_baseline_then_the_events() -> None:
    sample = Path(__file__).resolve().parents[1] / "data" / "smart_agent" / "squeue_array_O.txt"
    (data,) = json.loads(
        runner.invoke(app, ["agent", "inspect", "--format", "json", str(sample)]).stdout
    )
    first = {job["job_id"]: job for job in data["jobs"] if job["baseline"]}
    assert sorted(first) == ["1_[0-3]", "2"]  # the pending array's row, and the het job
    assert first["1_[0-3]"]["pending_array"] and first["2"]["gpus"] == 2  # 1 + 1 GPU
    assert first["2"]["state"] == "PENDING" and "gone" not in first["2"]
    assert {e["job_id"] for e in data["events"]} == {"1_0", "1_1", "1_2", "1_3"}
    table = runner.invoke(app, ["agent", "inspect", str(sample)], env={"COLUMNS": "80"})
    assert "baseline: 2 jobs" in table.stdout and "5 more jobs first seen in later" in table.stdout
    assert "PENDING (array), gone" in table.stdout


def test_a_saved_sacct_table_lists_its_jobs_as_the_baseline() -> None:
    sample = str(ROOT / "sacct/G02_local_sacct_P_default_fields.txt")
    result = runner.invoke(app, ["agent", "inspect", sample], env={"COLUMNS": "80"})
    assert result.exit_code == 0 and "baseline:" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80, result.stdout
    (data,) = json.loads(
        runner.invoke(app, ["agent", "inspect", "--format", "json", sample]).stdout
    )
    assert data["jobs"] and all(job["baseline"] for job in data["jobs"])
