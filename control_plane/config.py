"""Control-plane settings: defaults, then a YAML file, then JITGPU_* environment variables."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from control_plane.db.engine import DEFAULT_DATABASE_URL


def data_dir(env: dict[str, str] | None = None) -> Path:
    """Where the server keeps its default SQLite file: $XDG_DATA_HOME/jitgpu or the like."""
    environ = os.environ if env is None else env
    base = environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base).expanduser() / "jitgpu"


def default_database_url(env: dict[str, str] | None = None) -> str:
    """The SQLite file in the user's data folder: the same one whatever the working directory."""
    return f"sqlite:///{data_dir(env) / 'jitgpu.db'}"


def resolve_sqlite(url: str, base: Path) -> str:
    """A relative SQLite path in a settings file is relative to that file's folder."""
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        return url
    path = url[len(prefix) :]
    if path.startswith("~"):
        return prefix + os.path.expanduser(path)
    if not path or path == ":memory:" or os.path.isabs(path):
        return url
    return prefix + str((base / path).resolve())


class ConfigError(ValueError):
    """A settings file or variable is wrong; the message names the file, the key and the rule."""


class ServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    database_url: str = DEFAULT_DATABASE_URL  # load_settings puts the data folder's file here
    admin_token: str | None = Field(default=None, min_length=16)
    heartbeat_timeout_s: float = Field(default=15.0, gt=0, le=3600)
    default_lead_s: int = Field(default=120, ge=0, le=86400)
    jobs_interval_s: float = Field(default=2.0, gt=0, le=3600)
    heartbeat_flush_s: float = Field(
        default=0.5, ge=0, le=60, description="Write-behind period of heartbeats; 0 writes each."
    )
    # "heartbeats": this server takes only nodes' heartbeats, next to a main server on the
    # same database (docs/operations.md); it runs no periodic jobs.
    role: Literal["all", "heartbeats"] = "all"
    # A heartbeats-role server this one starts as its own child process on this port (same
    # host and database), and names to node agents when they register.
    heartbeat_port: int | None = Field(default=None, ge=1, le=65535)
    run_jobs: bool = True
    retention_days: float = Field(default=30.0, gt=0, le=3650)
    max_body_bytes: int = Field(default=1_048_576, ge=1024, le=64 * 1_048_576)
    log_level: str = Field(default="info", pattern="^(debug|info|warning|error)$")
    log_format: str = Field(default="json", pattern="^(json|text)$")
    migrate: bool = True
    max_queued_per_tenant: int = Field(
        default=10_000,
        ge=0,
        le=10_000_000,
        description="Requests a tenant may have waiting beyond its quota; past it: 429.",
    )
    # A part of the server (event loop, heartbeat flush, job thread) later than its period by
    # this much counts as stalled: liveness then waits a full heartbeat timeout.
    stall_threshold_s: float = Field(default=2.0, gt=0, le=600)
    # Request limits (docs/limits.md): the transport refuses a bad client before the app runs.
    max_header_bytes: int = Field(default=65_536, ge=1024, le=1_048_576)
    max_headers: int = Field(default=100, ge=10, le=1000)
    header_timeout_s: float = Field(default=10.0, gt=0, le=300)
    body_idle_timeout_s: float = Field(default=30.0, gt=0, le=600)
    max_connections_per_ip: int = Field(default=256, ge=1, le=100_000)
    # Requests per second (and burst) per key; admin is never limited.
    rate_limits: bool = True
    tenant_rate_per_s: float = Field(default=1000.0, gt=0)
    tenant_burst: float = Field(default=2000.0, ge=1)
    node_rate_per_s: float = Field(default=5000.0, gt=0)
    node_burst: float = Field(default=10000.0, ge=1)
    anonymous_rate_per_s: float = Field(default=200.0, gt=0)
    anonymous_burst: float = Field(default=400.0, ge=1)

    @field_validator("run_jobs")
    @classmethod
    def _no_jobs_in_heartbeats_role(cls, value: bool, info: ValidationInfo) -> bool:
        # Runs only for a value given (file, variable or flag), not for the default.
        if value and info.data.get("role") == "heartbeats":
            raise ValueError(
                "a server with role 'heartbeats' runs no periodic jobs (allowed with that "
                "role: false; the main server runs them)"
            )
        return value

    @model_validator(mode="after")
    def _heartbeats_role_runs_no_jobs(self) -> ServerSettings:
        if self.role == "heartbeats":
            self.run_jobs = False
            self.heartbeat_port = None  # it is the child that would listen there
        elif self.heartbeat_port is not None and self.heartbeat_port == self.port:
            raise ValueError(
                f"heartbeat_port {self.heartbeat_port} is the server's own port: allowed, any "
                "other port (its heartbeats-role child listens there)"
            )
        return self


ENV_KEYS = {
    "JITGPU_HOST": "host",
    "JITGPU_PORT": "port",
    "JITGPU_DATABASE_URL": "database_url",
    "JITGPU_ADMIN_TOKEN": "admin_token",
    "JITGPU_HEARTBEAT_TIMEOUT_S": "heartbeat_timeout_s",
    "JITGPU_DEFAULT_LEAD_S": "default_lead_s",
    "JITGPU_JOBS_INTERVAL_S": "jobs_interval_s",
    "JITGPU_HEARTBEAT_FLUSH_S": "heartbeat_flush_s",
    "JITGPU_RUN_JOBS": "run_jobs",
    "JITGPU_ROLE": "role",
    "JITGPU_HEARTBEAT_PORT": "heartbeat_port",
    "JITGPU_RETENTION_DAYS": "retention_days",
    "JITGPU_LOG_LEVEL": "log_level",
    "JITGPU_LOG_FORMAT": "log_format",
    "JITGPU_MAX_QUEUED_PER_TENANT": "max_queued_per_tenant",
    "JITGPU_STALL_THRESHOLD_S": "stall_threshold_s",
    "JITGPU_MAX_HEADER_BYTES": "max_header_bytes",
    "JITGPU_MAX_HEADERS": "max_headers",
    "JITGPU_HEADER_TIMEOUT_S": "header_timeout_s",
    "JITGPU_BODY_IDLE_TIMEOUT_S": "body_idle_timeout_s",
    "JITGPU_MAX_CONNECTIONS_PER_IP": "max_connections_per_ip",
    "JITGPU_RATE_LIMITS": "rate_limits",
    "JITGPU_TENANT_RATE_PER_S": "tenant_rate_per_s",
    "JITGPU_TENANT_BURST": "tenant_burst",
    "JITGPU_NODE_RATE_PER_S": "node_rate_per_s",
    "JITGPU_NODE_BURST": "node_burst",
    "JITGPU_ANONYMOUS_RATE_PER_S": "anonymous_rate_per_s",
    "JITGPU_ANONYMOUS_BURST": "anonymous_burst",
}


# Settings whose value is a secret (or may hold one): an error names the key, never the value.
SECRET_KEYS = frozenset({"admin_token", "database_url"})


def _shown(key: str, value: object) -> str:
    if key.split(".")[0] in SECRET_KEYS:
        size = f"{len(value)} characters, " if isinstance(value, str) else ""
        return f"got {size}value not shown"
    return f"got {value!r}"


def _describe(error: ValidationError, source: str) -> str:
    lines = []
    for item in error.errors():
        key = ".".join(str(p) for p in item["loc"]) or "(top level)"
        lines.append(f"{source}: key {key!r}: {item['msg']} ({_shown(key, item.get('input'))})")
    return "\n".join(lines)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    # PyYAML's own text quotes the offending line, which may be the admin token's.
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or exc.__class__.__name__
    return f"{problem}{where}"


def load_settings(
    path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> ServerSettings:
    """Merge file, environment and explicit overrides (in rising precedence) and validate."""
    data: dict[str, Any] = {}
    source = "settings"
    if path is not None:
        source = str(path)
        try:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {_yaml_problem(exc)}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
        if isinstance(loaded.get("database_url"), str):
            folder = Path(path).expanduser().resolve().parent
            loaded["database_url"] = resolve_sqlite(loaded["database_url"], folder)
        data.update(loaded)
    environ = os.environ if env is None else env
    for var, key in ENV_KEYS.items():
        if environ.get(var):
            data[key] = environ[var]
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    data.setdefault("database_url", default_database_url(env))
    try:
        return ServerSettings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from None
