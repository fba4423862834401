"""A throwaway Slurm cluster per test (about half a second to start)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.slurm_cluster import SlurmCluster, start_or_skip


@pytest.fixture
def slurm() -> Iterator[SlurmCluster]:
    cluster = start_or_skip(boot_delay_s=2.0)
    try:
        yield cluster
    finally:
        cluster.stop()
