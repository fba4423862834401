"""The per-job GPU cap (`max_job_gpus`): configured, else the largest of the user's own jobs
seen so far, so a misread count (512 from one sacct row) is clamped to what the user runs."""

from __future__ import annotations

import logging

log = logging.getLogger("jitgpu.agent")

# The cap before any job of the user has been seen with a GPU count, and its floor after
# (bounded by the policy's max_gpus_total): a user whose jobs so far took 1 GPU is not cut
# when one takes 2; half of a common 8-GPU node.
NO_HISTORY_JOB_GPUS = 4
MAX_LOGGED = 10_000


class JobGpuCap:
    """What one job may claim or allocate, and a forecast hold's size at most."""

    def __init__(self, configured: int | None = None) -> None:
        self.configured = configured  # `max_job_gpus` from the config: used as it is
        self.largest = 0  # the most GPUs one of the user's jobs was seen with
        self._logged: set[str] = set()  # jobs whose clamp was logged (once each)

    def see(self, gpus: int | None) -> None:
        """A job of the user's, with the GPU count an event gives it."""
        if gpus:
            self.largest = max(self.largest, gpus)

    def limit(self, max_gpus_total: int) -> tuple[int, str]:
        """The cap and where it comes from (said in the log and in decisions)."""
        if self.configured is not None:
            return self.configured, "set in the config"
        if self.largest > NO_HISTORY_JOB_GPUS:
            return min(self.largest, max_gpus_total), "the largest of your jobs seen so far"
        why = "your jobs so far took fewer" if self.largest else "no job history yet"
        return min(NO_HISTORY_JOB_GPUS, max_gpus_total), f"{why}: {NO_HISTORY_JOB_GPUS}"

    def clamp(self, key: str, job_id: str | None, gpus: int, cap: tuple[int, str]) -> int:
        """`gpus` held to the cap; a clamp is logged once per job (`key`), with both counts."""
        limit, why = cap
        if gpus <= limit:
            return gpus
        if key not in self._logged:
            if len(self._logged) >= MAX_LOGGED:
                self._logged.clear()  # bounded; a repeated warning is the worst case
            self._logged.add(key)
            log.warning(
                "job %s asks for %d GPUs: clamped to %d, max_job_gpus (%s)",
                job_id,
                gpus,
                limit,
                why,
            )
        return limit
