"""Files the server creates are the operator's alone; a generated admin token is never printed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import httpx
import pytest

from control_plane.db.engine import Database
from control_plane.db.migrate import upgrade
from tests.support.procs import ServerProc

pytestmark = pytest.mark.e2e


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_server_files_are_0600_and_the_generated_token_is_only_in_a_file(
    tmp_path: Path,
) -> None:
    old = os.umask(0o022)  # a permissive umask, as a login shell's often is
    try:
        # No admin token configured: the server makes one.
        server = ServerProc(tmp_path, admin_token="", env={"JITGPU_ADMIN_TOKEN": ""}).start()
    finally:
        os.umask(old)
    try:
        server.wait_ready()
        token_file = tmp_path / "jitgpu-admin-token"
        token = token_file.read_text().strip()
        assert len(token) >= 16
        # The token works, and the server said where it is, not what it is.
        r = httpx.get(f"{server.url}/v1/tenants", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        output = server.output()
        assert str(token_file) in output
        assert token not in output
        for name in ("jitgpu.db", "jitgpu.db-wal", "jitgpu.db-shm", "jitgpu-admin-token"):
            path = tmp_path / name
            assert path.exists(), name
            assert _mode(path) == 0o600, f"{name}: {oct(_mode(path))}"
    finally:
        server.stop()
    # A restart reuses the token (clients keep working) and still prints no secret.
    again = ServerProc(
        tmp_path, admin_token="", env={"JITGPU_ADMIN_TOKEN": ""}, port=server.port, name="s2"
    ).start()
    try:
        again.wait_ready()
        assert (tmp_path / "jitgpu-admin-token").read_text().strip() == token
        assert token not in again.output()
    finally:
        again.stop()


def test_database_files_are_private_even_under_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        db = Database(f"sqlite:///{tmp_path / 'state.db'}")
        upgrade(db)
        db.dispose()
    finally:
        os.umask(old)
    assert _mode(tmp_path / "state.db") == 0o600


def test_files_an_older_version_left_readable_are_made_private(tmp_path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        path = tmp_path / f"old.db{suffix}"
        path.write_bytes(b"")
        path.chmod(0o644)
    (tmp_path / "old.db").unlink()  # an empty file is no database; let SQLite make it
    Database(f"sqlite:///{tmp_path / 'old.db'}").dispose()
    for suffix in ("", "-wal", "-shm"):
        assert _mode(tmp_path / f"old.db{suffix}") == 0o600, suffix
