"""What to watch: a file or a folder with include/exclude globs, and which filesystems are
remote (where change notifications do not arrive and polling is needed)."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Compressed and temporary files are never logs being written.
DEFAULT_EXCLUDE: tuple[str, ...] = (
    "*.gz",
    "*.bz2",
    "*.xz",
    "*.zst",
    "*.zip",
    "*.tar",
    "*.swp",
    "*.swx",
    "*~",
    "*.tmp",
    "*.pt",
    "*.pth",
    "*.ckpt",
    "*.safetensors",
    "*.bin",
    "*.npy",
    "*.npz",
    "*.parquet",
)
SKIP_DIRS = frozenset({".git", "__pycache__", ".ipynb_checkpoints", "node_modules", ".venv"})
NETWORK_FS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb",
        "smb3",
        "smbfs",
        "fuse.sshfs",
        "lustre",
        "gpfs",
        "beegfs",
        "fuse.beegfs",
        "ceph",
        "fuse.ceph",
        "glusterfs",
        "fuse.glusterfs",
        "9p",
        "afs",
        "davfs",
        "fuse.gcsfuse",
        "fuse.s3fs",
        "fuse.rclone",
        "wekafs",
        "panfs",
    }
)


@dataclass(frozen=True, slots=True)
class WatchSpec:
    """One watched path. For a folder, files below it (recursively unless `recursive` is
    false) whose path relative to the folder, or name, matches an `include` glob and no
    `exclude` glob. `key` is the owner's tag for it (which parser to use)."""

    path: Path
    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    recursive: bool = True
    backfill: bool = False
    polling: bool | None = None  # None: decide from the filesystem
    key: Any = field(default=None, compare=False)

    def wants(self, path: Path) -> bool:
        """Whether `path` is a file this spec follows (by name only; no I/O)."""
        if path == self.path:
            return True
        try:
            rel = path.relative_to(self.path)
        except ValueError:
            return False
        if not self.recursive and len(rel.parts) != 1:
            return False
        if any(part in SKIP_DIRS for part in rel.parts[:-1]):
            return False
        return _matches(rel, self.include) and not _matches(rel, self.exclude)


def _matches(rel: Path, patterns: tuple[str, ...]) -> bool:
    text = rel.as_posix()
    name = rel.name
    return any(fnmatch.fnmatch(text, p) or fnmatch.fnmatch(name, p) for p in patterns)


def files_of(spec: WatchSpec, limit: int) -> Iterator[Path]:
    """Regular files the spec matches now (at most `limit`), without following links to
    folders."""
    path = spec.path
    if path.is_file():
        yield path
        return
    if not path.is_dir():
        return
    count = 0
    for root, dirs, files in os.walk(path, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS) if spec.recursive else []
        for name in sorted(files):
            candidate = Path(root, name)
            if spec.wants(candidate) and candidate.is_file():
                yield candidate
                count += 1
                if count >= limit:
                    return


def watch_root(spec: WatchSpec) -> tuple[Path, bool] | None:
    """The folder to ask for change notifications, and whether recursively: the folder
    itself, a file's folder, or for a path that does not exist yet its nearest parent."""
    path = spec.path
    if path.is_dir():
        return path, spec.recursive
    parent = path.parent
    if parent.is_dir():
        return parent, False
    return None


def is_network_fs(path: Path) -> bool:
    """Whether `path` lies on a remote filesystem (NFS, SMB, Lustre, sshfs...)."""
    try:
        import psutil

        partitions = psutil.disk_partitions(all=True)
    except Exception:  # no mount table readable: assume local
        return False
    target = str(path.resolve() if path.exists() else path)
    best, kind = "", ""
    for part in partitions:
        mount = part.mountpoint
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) > len(best):
            best, kind = mount, part.fstype
    return kind.lower() in NETWORK_FS
