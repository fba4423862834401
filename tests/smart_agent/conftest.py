"""Fixtures of the smart-agent tests: a live control plane for the agent core."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import FakeClock
from tests.smart_agent.agent_world import World, make_world


@pytest.fixture
def world(tmp_path: Path, clock: FakeClock) -> Iterator[World]:
    with make_world(tmp_path, clock) as w:
        yield w
