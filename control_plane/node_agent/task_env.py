"""The environment a task or warm-up starts from: an allow-list, never the agent's secrets."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from control_plane.node_agent.config import BASE_TASK_ENV

# Ours: the agent's credentials and settings. A job gets only the JITGPU_* variables made
# for it (its GPUs, its allocation or hold id, its cache folder), added after this filter.
OWN_PREFIX = "JITGPU_"


def clean_env(environ: Mapping[str, str], pass_env: Iterable[str] = ()) -> dict[str, str]:
    """PATH, HOME, LANG, CUDA_VISIBLE_DEVICES and the names the node config lists, if set."""
    wanted = [*BASE_TASK_ENV, *pass_env]
    return {
        name: environ[name]
        for name in wanted
        if name in environ and not name.startswith(OWN_PREFIX)
    }
