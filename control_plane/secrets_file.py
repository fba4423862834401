"""The generated admin token: kept in a 0600 file beside the database, never printed."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from sqlalchemy.engine import make_url

TOKEN_FILE = "jitgpu-admin-token"
MIN_LEN = 16


def token_path(database_url: str) -> Path:
    """Beside the SQLite file; for a server database, in the working folder."""
    try:
        url = make_url(database_url)
    except Exception:  # a bad URL is reported by the database layer, with its key
        return Path(TOKEN_FILE).resolve()
    if url.drivername.startswith("sqlite") and url.database and url.database != ":memory:":
        return Path(url.database).expanduser().resolve().parent / TOKEN_FILE
    return Path(TOKEN_FILE).resolve()


def admin_token(database_url: str) -> tuple[Path, str]:
    """The token in the file (made now if missing or unusable) and the file's path.

    Reused across restarts, so that clients keep working; the file is created 0600 and an
    existing file is set to 0600, whatever the umask.
    """
    path = token_path(database_url)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        os.chmod(path, 0o600)
        found = path.read_text().strip()
        if len(found) >= MIN_LEN:
            return path, found
    token = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (token + "\n").encode())
    finally:
        os.close(fd)
    return path, token
