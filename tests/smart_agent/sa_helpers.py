"""Helpers for the smart-agent input tests: sample data, planted secrets, collecting events."""

from __future__ import annotations

import string
from pathlib import Path

from hypothesis import strategies as st

from predictors.types import Event

DATA = Path(__file__).resolve().parents[1] / "data" / "smart_agent"
NOW = 1_714_600_000.0  # 2024-05-01 21:46:40 UTC, after every time in the samples

ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"


def body(alphabet: str, size: int, tag: str = "Zq8") -> st.SearchStrategy[str]:
    # A fixed start with a digit and both cases, as real keys have: a body of one repeated
    # letter could also occur by chance in the text around it.
    return st.text(alphabet, min_size=size - len(tag), max_size=size - len(tag)).map(
        lambda s: tag + s
    )


# Each planted secret: (text to put in a line, the part that must never come out).
PLANTED: dict[str, st.SearchStrategy[tuple[str, str]]] = {
    "openai": body(ALNUM + "_-", 48).map(lambda b: ("sk-proj-" + b, b)),
    "openai_old": body(ALNUM, 48).map(lambda b: ("sk-" + b, b)),
    "anthropic": body(ALNUM + "_-", 60).map(lambda b: ("sk-ant-api03-" + b, b)),
    "aws_id": body(string.ascii_uppercase + string.digits, 16, "ZQ8").map(
        lambda b: ("AKIA" + b, b)
    ),
    "aws_secret": body(B64, 40).map(lambda b: ("aws_secret_access_key = " + b, b)),
    "github": body(ALNUM, 36).map(lambda b: ("ghp_" + b, b)),
    "github_pat": body(ALNUM + "_", 60).map(lambda b: ("github_pat_" + b, b)),
    "slack": body(ALNUM, 24).map(lambda b: ("xoxb-1234567890-" + b, b)),
    "huggingface": body(ALNUM, 34).map(lambda b: ("hf_" + b, b)),
    "google": body(ALNUM + "_-", 35).map(lambda b: ("AIza" + b, b)),
    "jwt": body(ALNUM + "_-", 43).map(
        lambda b: ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJib2IifQ." + b, b)
    ),
    "bearer": body(ALNUM + "._-", 32).map(lambda b: ("Authorization: Bearer " + b, b)),
    "password": body(ALNUM + "!#%^*", 16).map(lambda b: ("password=" + b, b)),
    "json_token": body(ALNUM, 20).map(lambda b: (f'"api_key": "{b}"', b)),
    "cli_secret": body(ALNUM, 20).map(lambda b: ("--hf-token " + b, b)),
    "url": body(ALNUM, 14).map(lambda b: (f"postgresql://bob:{b}@db.internal:5432/runs", b)),
    "email": body(string.ascii_lowercase, 10, "zqx").map(lambda b: (f"{b}@example.org", b + "@")),
    "ipv4": st.tuples(*[st.integers(100, 254)] * 4).map(
        lambda t: ((ip := ".".join(map(str, t))), ip)
    ),
    "ipv6": st.lists(st.integers(0x1000, 0xFFFF), min_size=8, max_size=8).map(
        lambda g: ((ip := ":".join(f"{x:x}" for x in g)), ip)
    ),
    "home": body(string.ascii_lowercase, 10, "zqx").map(lambda b: (f"/home/{b}/runs/x.log", b)),
    "mac_home": body(string.ascii_lowercase, 10, "zqx").map(lambda b: (f"/Users/{b}/runs", b)),
}
SEPARATORS = [" ", "\t", ", ", "; ", " (", ") ", " | ", " [", "] ", " => "]

PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAx3Xb9vZq8Lk1qSh2nE7pQ0rTfWm4YcK6dGj8uVbN2oPlR5sA\n"
    "8Hc0ZtM1wJe3bFqUk9xVy7LrP2nDg4aS6iQoT5uW0mEjB3hKcN8vY1pXz7fR2dGt\n"
    "-----END RSA PRIVATE KEY-----"
)
PEM_BODY = PEM.splitlines()[1:3]


def reprs(events: list[Event]) -> str:
    return "\n".join(repr(e) for e in events)
