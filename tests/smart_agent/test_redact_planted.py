"""Secrets planted where researchers leave them (launch commands in shell history, framework
log lines, Slurm job names, JSON metrics) in copies of the real samples: none reaches an
event, the text `jitgpu agent inspect` shows, or the LLM prompt. detect-secrets is the
oracle: it finds the planted secrets in the raw files and nothing in what the agent keeps."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.core.scan import scan_line
from detect_secrets.settings import transient_settings

from predictors import HistoryBuilder
from predictors.llm_config import LlmConfig
from predictors.prompting import load_prompt, render_messages
from smart_agent.inspection import inspect_file

ROOT = Path(__file__).resolve().parents[1] / "data" / "real-inputs"
NOW = datetime(2026, 11, 27, tzinfo=UTC).timestamp()


def u(n: int, tag: str, alphabet: str = "alnum") -> str:
    """A unique token body of `n` characters for secret `tag` (digits and both cases)."""
    digest = hashlib.sha256(tag.encode()).hexdigest()
    if alphabet == "hex":
        return (digest * 3)[:n]
    letters = "".join(
        c.upper() if i % 3 == 0 else c
        for i, c in enumerate(base64.b32encode(bytes.fromhex(digest)).decode().lower().rstrip("="))
    )
    return ("Q7" + letters * 3)[:n]


# (name, secret in context, the part that must never come out)
SECRETS: list[tuple[str, str, str]] = [
    ("wandb_flag", f"--wandb_key {u(40, 'w1', 'hex')}", u(40, "w1", "hex")),
    ("wandb_env", f"WANDB_API_KEY={u(40, 'w2', 'hex')}", u(40, "w2", "hex")),
    ("wandb_login", f"wandb login {u(40, 'w3', 'hex')}", u(40, "w3", "hex")),
    ("kaggle", f"KAGGLE_KEY={u(32, 'kg', 'hex')}", u(32, "kg", "hex")),
    ("gitlab", f"glpat-{u(20, 'gl')}", u(20, "gl")),
    ("google_oauth", f"ya29.a0Af{u(40, 'ya')}", u(40, "ya")),
    ("replicate", f"r8_{u(37, 'r8')}", u(37, "r8")),
    ("azure_key", f"AccountName=lab;AccountKey={u(86, 'az')}==;EndpointSuffix=core", u(86, "az")),
    (
        "azure_sas",
        f"https://lab.blob.core.windows.net/c?sv=2022&sig={u(43, 'sas')}%3D",
        u(43, "sas"),
    ),
    ("sshpass", f"sshpass -p '{u(14, 'ssh')}' ssh alice@login1", u(14, "ssh")),
    ("mysql", f"mysql -u root -p{u(12, 'my')} runs", u(12, "my")),
    ("pypi", f"pypi-AgEIcHlwaS5vcmc{u(60, 'pypi')}", u(60, "pypi")),
    ("npm", f"npm_{u(36, 'npm')}", u(36, "npm")),
    ("stripe", f"sk_live_{u(24, 'stripe')}", u(24, "stripe")),
    ("twilio", f"SK{u(32, 'tw', 'hex')}", u(32, "tw", "hex")),
    ("databricks", f"dapi{u(32, 'db', 'hex')}", u(32, "db", "hex")),
    ("scratch_user", "/scratch/zqxmarta/ckpt/last.pt", "zqxmarta"),
    ("gpfs_user", "/scratch/gpfs/zqxolaf/data", "zqxolaf"),
    ("internal_host", "rsync to dgx07zq.hpc.zqx-uni.edu", "dgx07zq"),
    ("openai", f"sk-proj-{u(48, 'oa')}", u(48, "oa")),
    ("anthropic", f"sk-ant-api03-{u(60, 'an')}", u(60, "an")),
    ("github", f"ghp_{u(36, 'gh')}", u(36, "gh")),
    ("huggingface", f"HF_TOKEN=hf_{u(34, 'hf')}", u(34, "hf")),
    ("hub_token_flag", f"--hub_token hf_{u(34, 'hub')}", u(34, "hub")),
    ("aws_id", "AKIAZQ8ABCDEFGHIJKLM", "AKIAZQ8ABCDEFGHIJKLM"),
    ("aws_secret", f"aws_secret_access_key={u(40, 'aws')}", u(40, "aws")),
    ("slack", f"xoxb-123456789012-{u(24, 'sl')}", u(24, "sl")),
    ("google_api", f"AIza{u(35, 'gapi')}", u(35, "gapi")),
    ("jwt", f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJib2IifQ.{u(43, 'jwt')}", u(43, "jwt")),
    ("bearer", f"curl -H 'Authorization: Bearer {u(32, 'br')}'", u(32, "br")),
    ("db_url", f"postgresql://bob:{u(12, 'pg')}@db.internal:5432/runs", u(12, "pg")),
    ("email", "mail zqxcarol@uni-x.edu", "zqxcarol"),
    ("ipv4", "MASTER_ADDR=10.21.33.47", "10.21.33.47"),
    ("home_user", "/home/zqxdave/runs/a.log", "zqxdave"),
    ("pgpassword", f"PGPASSWORD={u(12, 'pgp')} psql -h db", u(12, "pgp")),
    ("password_flag", f"--db-password={u(12, 'dbp')}", u(12, "dbp")),
    ("sendgrid", f"SG.{u(22, 'sg1')}.{u(43, 'sg2')}", u(22, "sg1")),
    ("docker_login", f"docker login -u bot -p {u(14, 'dk')} registry", u(14, "dk")),
]


def _plant(tmp_path: Path) -> list[Path]:
    """Copies of real samples with one planted secret per line that the agent reads as an
    event (its text then travels as the event's excerpt)."""
    history = tmp_path / ".bash_history"
    shutil.copy(ROOT / "shell/B01_bash_history", history)
    log = tmp_path / "train.log"
    shutil.copy(ROOT / "hf_trainer/H01_openr1_prefixed_running_training.log", log)
    sacct = tmp_path / "jobs.txt"
    shutil.copy(ROOT / "sacct/G04_local_sacct_P_times_tres.txt", sacct)
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text((ROOT / "jsonl/J01_slm_metrics.jsonl").read_text()[:2000])
    with (
        open(history, "a") as h,
        open(log, "a") as g,
        open(sacct, "a") as s,
        open(metrics, "a") as m,
    ):
        for i, (_, secret, _) in enumerate(SECRETS):
            h.write(f"torchrun --nproc_per_node 2 train.py {secret} --seed {i}\n")
            stamp = f"2025-03-06 12:0{i % 10}:09,913"
            g.write(f"[INFO|trainer.py:2405] {stamp} >> Training completed. {secret}\n")
            row = f"{500 + i}|ft {secret}|gpu|alice|COMPLETED|2026-11-24T17:58:22|"
            s.write(row.replace("|ft ", "|ft ").replace(secret, secret.replace("|", " ")))
            s.write("2026-11-24T17:58:22|2026-11-24T17:58:52|00:00:30|gres/gpu=1||1\n")
            m.write(json.dumps({"msg": f"training done {secret}", "step": i}) + "\n")
    return [history, log, sacct, metrics]


def _prompt(events) -> str:  # type: ignore[no-untyped-def]
    history = HistoryBuilder()
    for event in events:
        history.observe(event)
    context = history.context("alice", NOW)
    messages = render_messages(
        load_prompt("forecast/v1"), context, NOW, LlmConfig(model="gpt-4o-mini")
    )
    return json.dumps(messages)


# detect-secrets' provider and keyword detectors; its entropy detectors read a whole plain
# line given to scan_line as one candidate string, so they flag ordinary log text.
PLUGINS = [
    {"name": cls.__name__}
    for cls in get_mapping_from_secret_type_to_class().values()
    if "Entropy" not in cls.__name__
]


def _oracle(lines: list[str]) -> list[str]:
    with transient_settings({"plugins_used": PLUGINS}):
        return [f"{s.type}: {line}" for line in lines for s in scan_line(line)]


def test_at_least_thirty_formats_are_planted() -> None:
    assert len({name for name, _, _ in SECRETS}) >= 30


def test_no_planted_secret_reaches_events_inspect_or_the_prompt(tmp_path: Path) -> None:
    kept: list[str] = []
    events = []
    for path in _plant(tmp_path):
        seen = inspect_file(path, user="alice", now=NOW, tz=UTC, max_redacted=10_000)
        assert seen.events, path  # the planted lines are read as events
        events += [e for _, e in seen.events]
        kept += seen.redacted + [repr(e) for _, e in seen.events]
    # Every planted line made an event carrying its text.
    assert sum(1 for e in events if e.excerpt and "REDACTED" in e.excerpt) >= len(SECRETS)
    prompt = _prompt(events)
    text = "\n".join(kept)
    leaked = [name for name, _, part in SECRETS if part in text or part in prompt]
    assert leaked == []


def test_detect_secrets_finds_them_raw_and_nothing_in_what_is_kept(tmp_path: Path) -> None:
    paths = _plant(tmp_path)
    raw = [line for p in paths for line in p.read_text().splitlines()[-len(SECRETS) :]]
    assert len(_oracle(raw)) >= 15  # the oracle sees the planted secrets
    kept: list[str] = []
    for path in paths:
        seen = inspect_file(path, user="alice", now=NOW, tz=UTC, max_redacted=10_000)
        kept += seen.redacted + [e.excerpt for _, e in seen.events if e.excerpt]
    assert _oracle(kept) == []


@pytest.mark.parametrize("name", sorted(p.name for p in ROOT.rglob("*") if p.is_file()))
def test_detect_secrets_finds_nothing_in_the_corpus_as_kept(name: str) -> None:
    (path,) = [p for p in ROOT.rglob(name) if p.is_file()]
    seen = inspect_file(path, user="alice", now=NOW, tz=UTC, max_redacted=10_000)
    assert _oracle(seen.redacted) == []
