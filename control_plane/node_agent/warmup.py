"""Warm-up of one hold: run its profile's actions with the hold's GPUs visible, timed."""

from __future__ import annotations

import logging
import shutil
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from control_plane.node_agent.config import Action, CommandAction, CudaContextAction, StageAction
from control_plane.node_agent.procs import Child, ChildRegistry, OutputTail
from control_plane.node_agent.run_as import RunAs

log = logging.getLogger("jitgpu.node.warmup")

CUDA_WARM_SCRIPT = Path(__file__).with_name("cuda_warm.py")
STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class WarmupResult:
    ok: bool
    seconds: float
    exit_code: int | None = None
    output_tail: str = ""
    cancelled: bool = False


class _Failed(Exception):
    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def gpu_env(base: dict[str, str], gpu_uuids: list[str], cache_dir: Path) -> dict[str, str]:
    """The environment of anything run for a hold or a task: only its GPUs are visible."""
    return {
        **base,
        # UUIDs, not indices: CUDA's default device order differs from NVML's.
        "CUDA_VISIBLE_DEVICES": ",".join(gpu_uuids),
        "JITGPU_GPU_UUIDS": ",".join(gpu_uuids),
        "JITGPU_CACHE_DIR": str(cache_dir),
    }


class Warmup:
    """Runs a profile in a thread. `on_done` is called once the result is set.

    The owner is a hold (a pre-warm) or an allocation (a reactive job's cold start); its id is
    in JITGPU_HOLD_ID or JITGPU_ALLOCATION_ID.
    """

    def __init__(
        self,
        owner_id: str,
        profile: str,
        actions: list[Action] | None,
        *,
        gpu_uuids: list[str],
        cache_dir: Path,
        env: dict[str, str],
        clock: Callable[[], float],
        on_done: Callable[[], None] = lambda: None,
        registry: ChildRegistry | None = None,
        known_profiles: list[str] | None = None,
        kind: str = "hold",
        run_as: RunAs | None = None,
    ) -> None:
        self.owner_id = owner_id
        self.run_as = run_as
        self.label = f"{kind} {owner_id}"
        self.profile = profile
        self.actions = actions
        self.gpu_uuids = list(gpu_uuids)
        self.cache_dir = cache_dir
        owner_env = f"JITGPU_{kind.upper()}_ID"
        self.env = {**gpu_env(env, self.gpu_uuids, cache_dir), owner_env: owner_id}
        self.clock = clock
        self.on_done = on_done
        self.registry = registry or ChildRegistry(None)
        self.known_profiles = known_profiles or []
        self.tail = OutputTail()
        self.result: WarmupResult | None = None
        self._cancel = threading.Event()
        self._child: Child | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"warmup-{owner_id}", daemon=True)

    @property
    def done(self) -> bool:
        return self.result is not None

    def start(self) -> Warmup:
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def cancel(self) -> None:
        """Stop the running action's process group, without blocking; the result says cancelled."""
        self._cancel.set()
        with self._lock:
            child = self._child
        if child is not None:
            # In a thread: a command that ignores SIGTERM must not hold up the heartbeat loop.
            threading.Thread(target=child.stop, args=(STOP_GRACE_S,), daemon=True).start()

    def _run(self) -> None:
        start = self.clock()
        exit_code: int | None = None
        ok = False
        try:
            self._run_actions()
            ok = not self._cancel.is_set()
        except _Failed as exc:
            exit_code = exc.exit_code
            self.tail.write(f"\n[jitgpu] {exc}\n")
        except Exception as exc:  # a bug here must fail the hold, not kill the thread silently
            log.exception("%s: warm-up crashed", self.label)
            self.tail.write(f"\n[jitgpu] warm-up crashed: {exc!r}\n")
        self.result = WarmupResult(
            ok=ok,
            seconds=max(0.0, self.clock() - start),
            exit_code=exit_code,
            output_tail=self.tail.text(),
            cancelled=self._cancel.is_set(),
        )
        self.on_done()

    def _run_actions(self) -> None:
        if self.actions is None:
            known = ", ".join(self.known_profiles) or "none"
            raise _Failed(
                f"unknown warm-up profile {self.profile!r}: this node has {known} "
                "(add it under warmup_profiles in the node-agent config)"
            )
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        for action in self.actions:
            if self._cancel.is_set():
                return
            if isinstance(action, CommandAction):
                argv = (
                    ["/bin/sh", "-c", action.command]
                    if isinstance(action.command, str)
                    else list(action.command)
                )
                self._command(argv, action.timeout_s, extra_env=action.env)
            elif isinstance(action, StageAction):
                self._stage(action)
            elif isinstance(action, CudaContextAction) and action.cuda_context:
                python = action.python or sys.executable
                code = ["-c", action.snippet] if action.snippet else [str(CUDA_WARM_SCRIPT)]
                self._command([python, *code], action.timeout_s, label="cuda context warm")

    def _command(
        self,
        argv: list[str],
        timeout_s: float,
        *,
        extra_env: dict[str, str] | None = None,
        label: str | None = None,
    ) -> None:
        self.tail.write(f"$ {label or ' '.join(argv)}\n")
        child = Child(
            argv,
            env={**self.env, **(extra_env or {})},
            cwd=self.cache_dir,
            tail=self.tail,
            run_as=self.run_as,
        )
        try:
            child.start()
        except OSError as exc:
            raise _Failed(f"cannot start {argv[0]!r}: {exc.strerror}", 127) from None
        with self._lock:
            self._child = child
        self.registry.add(child, f"warm-up of {self.label}")
        try:
            if self._cancel.is_set():
                child.stop(STOP_GRACE_S)
                return
            code = child.wait(timeout_s)
            if code is None:
                code = child.stop(STOP_GRACE_S)
                raise _Failed(f"timed out after {timeout_s:g}s: {argv[0]}", code)
        finally:
            with self._lock:
                self._child = None
            self.registry.remove(child)
        if code != 0 and not self._cancel.is_set():
            raise _Failed(f"{label or argv[0]} exited with status {code}", code)

    def _stage(self, action: StageAction) -> None:
        source = action.stage
        name = action.dest or Path(source.rstrip("/")).name or "staged"
        dest = self.cache_dir / name
        deadline = self.clock() + action.timeout_s
        self.tail.write(f"$ stage {source} -> {dest}\n")
        if source.startswith(("http://", "https://")):
            self._download(source, dest, action.timeout_s)
            return
        src = Path(source).expanduser()
        if not src.exists():
            raise _Failed(f"stage: {source} does not exist")
        files = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
        copied = 0
        for path in files:
            if self._cancel.is_set():
                return
            if self.clock() > deadline:
                raise _Failed(f"stage: timed out after {action.timeout_s:g}s copying {source}")
            target = dest if src.is_file() else dest / path.relative_to(src)
            if _same_file(path, target):
                continue  # already in the cache
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                shutil.copy2(path, target)
            except OSError as exc:
                raise _Failed(f"stage: cannot copy {path}: {exc.strerror}") from None
            copied += 1
        self.tail.write(f"staged {copied} file(s), {len(files) - copied} already cached\n")

    def _download(self, url: str, dest: Path, timeout_s: float) -> None:
        if dest.exists():
            self.tail.write("already cached\n")
            return
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".part")
        try:
            with httpx.stream("GET", url, timeout=timeout_s, follow_redirects=True) as r:
                r.raise_for_status()
                with part.open("wb") as out:
                    for chunk in r.iter_bytes():
                        if self._cancel.is_set():
                            return
                        out.write(chunk)
            part.replace(dest)
        except httpx.HTTPError as exc:
            raise _Failed(f"stage: download of {url} failed: {exc}") from None
        finally:
            part.unlink(missing_ok=True)
        self.tail.write(f"downloaded {dest.stat().st_size} bytes\n")


def _same_file(src: Path, dest: Path) -> bool:
    try:
        a, b = src.stat(), dest.stat()
    except OSError:
        return False
    return a.st_size == b.st_size and int(a.st_mtime) == int(b.st_mtime)
