"""The user's jitgpu folder and the credentials file `jitgpu login` writes (mode 0600)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

CREDENTIALS = "credentials.yaml"
KEYS = ("server", "token", "admin_token")


def config_dir(env: dict[str, str] | None = None) -> Path:
    """$JITGPU_CONFIG_DIR, else $XDG_CONFIG_HOME/jitgpu, else ~/.config/jitgpu."""
    environ = os.environ if env is None else env
    if environ.get("JITGPU_CONFIG_DIR"):
        return Path(environ["JITGPU_CONFIG_DIR"]).expanduser()
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base).expanduser() / "jitgpu"


def credentials_path() -> Path:
    return config_dir() / CREDENTIALS


class CredentialsError(ValueError):
    """The credentials file is unreadable or malformed; the message names the file."""


@dataclass
class Saved:
    server: str | None = None
    token: str | None = None
    admin_token: str | None = None


def load() -> Saved:
    """What `jitgpu login` saved; empty when nothing was."""
    path = credentials_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return Saved()
    except OSError as exc:
        raise CredentialsError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        raise CredentialsError(f"{path}: not valid YAML (run `jitgpu login` again)") from None
    if not isinstance(data, dict):
        raise CredentialsError(f"{path}: the top level must be a mapping")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise CredentialsError(
            f"{path}: unknown key {unknown[0]!r}; allowed keys: {', '.join(KEYS)}"
        )
    return Saved(**{k: (str(v) if v is not None else None) for k, v in data.items()})


def save(saved: Saved) -> Path:
    """Write the file readable by its owner only, created so from the start (no window)."""
    path = credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = {k: getattr(saved, k) for k in KEYS if getattr(saved, k) is not None}
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("# Written by `jitgpu login`; keep it private (mode 0600).\n")
        yaml.safe_dump(data, out, default_flow_style=False)
    os.chmod(tmp, 0o600)  # an older file of that name may have had a wider mode
    os.replace(tmp, path)
    return path
