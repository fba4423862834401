"""Config and policy loaders under hypothesis: any input is accepted or refused with a clear
error naming the file; nothing else ever escapes."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from control_plane.config import ConfigError as ServerConfigError
from control_plane.config import load_settings
from smart_agent.policy import Policy
from smart_agent.yamlconf import ConfigError, load_model

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False),
    st.text(max_size=20),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=10,
)
POLICY_KEYS = st.sampled_from([*sorted(Policy.model_fields), "typo_key"])
DOCS = st.dictionaries(POLICY_KEYS, VALUES, max_size=6)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


def _file(text: str) -> Path:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        handle.write(text)
    return Path(handle.name)


@FUZZ
@given(DOCS)
def test_policy_documents_load_or_name_the_file(doc: dict) -> None:
    path = _file(yaml.safe_dump(doc))
    try:
        load_model(Policy, path)
    except ConfigError as exc:
        assert str(path) in str(exc) and "key" in str(exc)
    finally:
        path.unlink()


@FUZZ
@given(st.text(max_size=200))
def test_policy_loader_survives_any_text(text: str) -> None:
    path = _file(text)
    try:
        load_model(Policy, path)
    except ConfigError as exc:
        assert str(exc).startswith(str(path))
    finally:
        path.unlink()


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "host",
                "port",
                "database_url",
                "admin_token",
                "heartbeat_timeout_s",
                "jobs_interval_s",
                "bogus",
            ]
        ),
        VALUES,
        max_size=5,
    )
)
def test_server_settings_load_or_name_the_key(doc: dict) -> None:
    path = _file(yaml.safe_dump(doc))
    try:
        load_settings(path, env={})
    except ServerConfigError as exc:
        assert str(path) in str(exc)
    finally:
        path.unlink()
