"""Node-agent settings: defaults, then the YAML file, then JITGPU_* variables, then the CLI."""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
)

from control_plane.node_agent.run_as import resolve_run_as
from control_plane.schemas.common import MAX_NAME_LEN, NAME_PATTERN, GpuModel

ENV_KEYS = {
    "JITGPU_SERVER": "server",
    "JITGPU_HEARTBEAT_SERVER": "heartbeat_server",
    "JITGPU_NODE_TOKEN": "token",
    "JITGPU_ENROL_TOKEN": "enrol_token",
}
# Names a task or warm-up inherits from the agent's environment without being listed:
# nothing secret, and nothing of the agent's own (its credentials above all).
BASE_TASK_ENV = ("PATH", "HOME", "LANG", "CUDA_VISIBLE_DEVICES")
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


class ConfigError(ValueError):
    """The settings are wrong; the message names the file, the key, the value and the rule."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CommandAction(_Strict):
    """Run a command (a list is run as is; a string by /bin/sh -c) with the hold's GPUs visible."""

    command: list[str] | str = Field(min_length=1)
    timeout_s: float = Field(default=300.0, gt=0, le=86400)
    env: dict[str, str] = Field(default_factory=dict)


class StageAction(_Strict):
    """Copy a local file or folder, or download an http(s) URL, into the cache folder."""

    stage: str = Field(min_length=1)
    dest: str | None = Field(default=None, description="Path inside cache_dir (default: name).")
    timeout_s: float = Field(default=600.0, gt=0, le=86400)

    @field_validator("dest")
    @classmethod
    def _inside_cache(cls, value: str | None) -> str | None:
        if value is not None:
            path = PurePosixPath(value)
            if path.is_absolute() or ".." in path.parts or not path.parts:
                raise ValueError("must be a relative path inside cache_dir, without '..'")
        return value


class CudaContextAction(_Strict):
    """Create a CUDA context on each visible GPU; skipped cleanly where there is no driver."""

    cuda_context: bool = True
    timeout_s: float = Field(default=120.0, gt=0, le=86400)
    python: str | None = Field(default=None, description="Interpreter (default: the agent's).")
    snippet: str | None = Field(default=None, description="Python code instead of the built-in.")


ACTION_KINDS = ("command", "stage", "cuda_context")


def _action_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        present = [k for k in ACTION_KINDS if k in value]
        return present[0] if len(present) == 1 else None
    for kind, cls in (("command", CommandAction), ("stage", StageAction)):
        if isinstance(value, cls):
            return kind
    return "cuda_context" if isinstance(value, CudaContextAction) else None


Action = Annotated[
    Annotated[CommandAction, Tag("command")]
    | Annotated[StageAction, Tag("stage")]
    | Annotated[CudaContextAction, Tag("cuda_context")],
    Discriminator(
        _action_kind,
        custom_error_type="action_kind",
        custom_error_message="each action needs exactly one of the keys: "
        + ", ".join(ACTION_KINDS),
    ),
]

DEFAULT_PROFILE: list[Action] = [
    CudaContextAction(),
    CommandAction(command='echo "warm-up: GPUs $CUDA_VISIBLE_DEVICES, cache $JITGPU_CACHE_DIR"'),
]


class SimulatedConfig(_Strict):
    count: int = Field(default=4, ge=0, le=64)
    model: GpuModel = "A100"
    memory_mb: int = Field(default=81920, ge=0, le=10_000_000)
    faults_file: Path | None = None


class BackoffConfig(_Strict):
    initial_s: float = Field(default=0.5, gt=0, le=60)
    max_s: float = Field(default=30.0, gt=0, le=3600)
    multiplier: float = Field(default=2.0, ge=1, le=10)


class TasksConfig(_Strict):
    enabled: bool = True
    # Variables of the agent's environment that tasks and warm-ups also get (beyond
    # BASE_TASK_ENV); the agent's own JITGPU_* credentials are never passed, listed or not.
    pass_env: list[Annotated[str, Field(pattern=ENV_NAME_PATTERN, max_length=128)]] = Field(
        default_factory=list, max_length=256
    )
    stop_grace_s: float = Field(default=10.0, ge=0, le=3600)
    # Run tasks and warm-up commands as this OS user (name or uid; the agent must be root),
    # so that a job cannot read the agent's state_dir and the node credential in it.
    user: str | None = Field(default=None, min_length=1, max_length=64)
    output_report_interval_s: float = Field(default=5.0, ge=0, le=3600)


class AgentConfig(_Strict):
    server: str | None = Field(default=None, pattern=r"^https?://\S+$")
    # A heartbeats-role server on the same database (docs/operations.md): heartbeats go there,
    # everything else to `server`, which also takes the heartbeats while this one fails.
    heartbeat_server: str | None = Field(default=None, pattern=r"^https?://\S+$")
    token: str | None = Field(default=None, min_length=1)
    # Traded once for this node's own credential, which is kept in state_dir.
    enrol_token: str | None = Field(default=None, min_length=1)
    name: str | None = Field(default=None, max_length=MAX_NAME_LEN, pattern=NAME_PATTERN)
    spine: str = Field(default="spine0", min_length=1, max_length=MAX_NAME_LEN)
    leaf: str = Field(default="leaf0", min_length=1, max_length=MAX_NAME_LEN)
    backend: Literal["auto", "nvml", "simulated"] = "auto"
    simulated: SimulatedConfig = Field(default_factory=SimulatedConfig)
    # Aliases become the scheduler's model names: they must be names the control plane takes.
    model_aliases: dict[str, GpuModel] = Field(default_factory=dict)
    heartbeat_interval_s: float = Field(default=5.0, gt=0, le=3600)
    # Between heartbeats the agent long-polls for new work, so a task starts as soon as it is
    # placed; 0 turns the long poll off (new work then waits for the next heartbeat).
    long_poll_s: float = Field(default=20.0, ge=0, le=55)
    request_timeout_s: float = Field(default=10.0, gt=0, le=600)
    backoff: BackoffConfig = Field(default_factory=BackoffConfig)
    cache_dir: Path = Path("~/.cache/jitgpu/node")
    # Where the node keeps its credential (credential-NAME.json, mode 0600). Not inside
    # cache_dir, which jobs are shown (JITGPU_CACHE_DIR); default: cache_dir + "-state".
    state_dir: Path | None = None
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    warmup_profiles: dict[str, list[Action]] = Field(default_factory=dict)
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    def profile(self, name: str) -> list[Action] | None:
        """A profile by name; `default` is built in unless the file redefines it."""
        if name in self.warmup_profiles:
            return self.warmup_profiles[name]
        return list(DEFAULT_PROFILE) if name == "default" else None

    def profile_names(self) -> list[str]:
        return sorted({"default", *self.warmup_profiles})

    @property
    def cache_path(self) -> Path:
        return self.cache_dir.expanduser()

    @property
    def state_path(self) -> Path:
        if self.state_dir is not None:
            return self.state_dir.expanduser()
        cache = self.cache_path
        return cache.with_name(cache.name + "-state")


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def read_mapping(path: str | Path) -> dict[str, Any]:
    """A YAML settings file's top-level mapping; ConfigError naming the file otherwise."""
    try:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
    return loaded


def load_config(
    path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> AgentConfig:
    """Merge the file, the environment and explicit overrides (rising precedence); validate."""
    data: dict[str, Any] = {} if path is None else read_mapping(path)
    source = "node-agent settings" if path is None else str(path)
    environ = os.environ if env is None else env
    from_env = {key: environ[var] for var, key in ENV_KEYS.items() if environ.get(var)}
    data = _merge(data, from_env)
    data = _merge(data, _drop_none(overrides or {}))
    try:
        cfg = AgentConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe(exc, source)) from None
    _check_task_user(cfg, source)
    return cfg


def _check_task_user(cfg: AgentConfig, source: str) -> None:
    """tasks.user must name a real user the agent can switch to; stage actions then refused."""
    if cfg.tasks.user is None:
        return
    for name, actions in cfg.warmup_profiles.items():
        for i, action in enumerate(actions):
            if isinstance(action, StageAction):
                # The agent copies stage files itself, as root, into a folder the jobs' user
                # can write: a link planted there would redirect root's write.
                raise ConfigError(
                    f"{source}: key 'warmup_profiles.{name}[{i}].stage': stage actions are "
                    "not allowed with tasks.user (allowed: command and cuda_context actions, "
                    "which run as that user; copy or download with a command action)"
                )
    try:
        resolve_run_as(cfg.tasks.user, source=source)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _drop_none(values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            value = _drop_none(value)
            if not value:
                continue
        if value is not None:
            out[key] = value
    return out


def describe(error: ValidationError, source: str) -> str:
    """One line per problem: where, which key, what was wrong, what is allowed."""
    lines = []
    for item in error.errors():
        key, model = _walk(item["loc"])
        message = item["msg"]
        if item["type"] == "extra_forbidden" and model is not None:
            message = "unknown key; allowed keys: " + ", ".join(model.model_fields)
        lines.append(f"{source}: key {key!r}: {message} (got {item.get('input')!r})")
    return "\n".join(lines)


def _walk(loc: tuple[Any, ...]) -> tuple[str, type[BaseModel] | None]:
    """The key as written in the file, and the settings model that holds its last part."""
    shown: list[str] = []
    current: Any = AgentConfig
    owner: type[BaseModel] | None = None
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            owner = current
            field = current.model_fields.get(part) if isinstance(part, str) else None
            current = None if field is None else field.annotation
        elif get_origin(current) is dict:
            current = get_args(current)[1]
        elif get_origin(current) is list:
            current = get_args(current)[0]
        elif get_origin(current) in (Union, UnionType):
            tagged = {_tag(m): m for m in get_args(current)}
            if part in tagged:
                current = tagged[part]
                continue  # the union's tag is pydantic's, not a key of the file
            current = None
        else:
            current = None
        shown.append(f"[{part}]" if isinstance(part, int) else str(part))
    return re.sub(r"\.\[", "[", ".".join(shown)) or "(top level)", owner


def _unwrap(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, UnionType) and len(args) == 1:
        return _unwrap(args[0])
    return annotation


def _tag(member: Any) -> str | None:
    for meta in get_args(member)[1:]:
        if isinstance(meta, Tag):
            return meta.tag
    return None
