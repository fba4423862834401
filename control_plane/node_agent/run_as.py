"""Tasks and warm-ups as another OS user (tasks.user): a job cannot read the agent's files."""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ALLOWED = (
    "allowed: the name or numeric uid of an existing user other than root, with the agent "
    "running as root; or leave the key out to run jobs as the agent's own user"
)


@dataclass(frozen=True)
class RunAs:
    """Who a job runs as: the user's uid, its primary group and no other group."""

    user: str
    uid: int
    gid: int
    home: str

    def popen_kwargs(self) -> dict[str, Any]:
        # extra_groups=[] drops the agent's supplementary groups (root's) from the child.
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def give(self, folder: Path) -> None:
        """Make `folder` the job user's, so that jobs (which run in it) can write there."""
        os.chown(folder, self.uid, self.gid)


def resolve_run_as(user: str | None, *, source: str, euid: int | None = None) -> RunAs | None:
    """The user named by tasks.user, or None when unset; raises ValueError naming the key."""
    if user is None:
        return None
    where = f"{source}: key 'tasks.user'"
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except (KeyError, OverflowError):
        raise ValueError(f"{where}: no user {user!r} on this machine ({ALLOWED})") from None
    if entry.pw_uid == 0:
        raise ValueError(f"{where}: jobs must not run as root (got {user!r}; {ALLOWED})")
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        raise ValueError(
            f"{where}: running jobs as {user!r} needs the agent to run as root, and it runs "
            f"as uid {euid} ({ALLOWED})"
        )
    return RunAs(user=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid, home=entry.pw_dir)
