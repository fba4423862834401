"""The node's own credential: enrol once with an enrolment token, keep it (0600), rotate it."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from control_plane.schemas.node_identity import NodeCredential

log = logging.getLogger("jitgpu.node")

CREDENTIAL_PREFIX = "jgn_"


@dataclass(frozen=True)
class StoredCredential:
    node_id: str
    name: str
    credential: str
    server: str | None = None


class CredentialStore:
    """One JSON file, written whole (temporary file, then rename) and readable by us only."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def for_node(cls, state_dir: Path, name: str) -> CredentialStore:
        return cls(state_dir / f"credential-{name}.json")

    def load(self) -> StoredCredential | None:
        try:
            data = json.loads(self.path.read_text())
            return StoredCredential(
                node_id=str(data["node_id"]),
                name=str(data["name"]),
                credential=str(data["credential"]),
                server=data.get("server"),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable credential file %s (%s)", self.path, exc)
            return None

    def save(self, credential: NodeCredential, *, server: str | None = None) -> StoredCredential:
        stored = StoredCredential(
            node_id=credential.node_id,
            name=credential.name,
            credential=credential.credential,
            server=server,
        )
        write_private(self.path, json.dumps(stored.__dict__, indent=2) + "\n")
        return stored

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` with mode 0600 from the first byte (no umask window)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
