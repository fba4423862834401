"""Warm-up profiles: commands with the hold's GPUs visible, staging, CUDA warm, failures, timing."""

from __future__ import annotations

import functools
import json
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from control_plane.node_agent.config import (
    CommandAction,
    CudaContextAction,
    StageAction,
)
from control_plane.node_agent.procs import TAIL_CHARS
from control_plane.node_agent.warmup import Warmup, WarmupResult
from tests.node_agent.helpers import Ticks, base_env, gone, read_pid
from tests.support.procs import wait_for

GPUS = ["GPU-1111", "GPU-2222"]


def run(tmp_path: Path, actions, *, clock=None, profile="p", timeout=30.0) -> WarmupResult:  # type: ignore[no-untyped-def]
    warmup = Warmup(
        "hold_1",
        profile,
        actions,
        gpu_uuids=GPUS,
        cache_dir=tmp_path / "cache",
        env=base_env(),
        clock=clock or Ticks([0.0]),
        known_profiles=["default", "p"],
    ).start()
    warmup.join(timeout)
    assert warmup.result is not None, "warm-up did not finish"
    return warmup.result


def test_commands_see_only_the_holds_gpus_and_the_time_is_measured(tmp_path: Path) -> None:
    probe = (
        "import json, os; print(json.dumps({k: os.environ.get(k) for k in "
        "('CUDA_VISIBLE_DEVICES', 'JITGPU_HOLD_ID', 'JITGPU_CACHE_DIR', 'EXTRA')}))"
    )
    result = run(
        tmp_path,
        [CommandAction(command=[sys.executable, "-c", probe], env={"EXTRA": "x"})],
        clock=Ticks([100.0, 102.5]),
    )
    assert result.ok and result.exit_code is None
    assert result.seconds == 2.5
    seen = json.loads(result.output_tail.splitlines()[-1])
    assert seen == {
        "CUDA_VISIBLE_DEVICES": "GPU-1111,GPU-2222",
        "JITGPU_HOLD_ID": "hold_1",
        "JITGPU_CACHE_DIR": str(tmp_path / "cache"),
        "EXTRA": "x",
    }


def test_a_failing_command_stops_the_profile_with_its_status_and_output(tmp_path: Path) -> None:
    marker = tmp_path / "second-ran"
    result = run(
        tmp_path,
        [
            CommandAction(command="echo compiling kernels; echo out of memory >&2; exit 7"),
            CommandAction(command=f"touch {marker}"),
        ],
    )
    assert not result.ok and result.exit_code == 7
    assert "compiling kernels" in result.output_tail and "out of memory" in result.output_tail
    assert "exited with status 7" in result.output_tail
    assert not marker.exists()


def test_output_tail_is_bounded(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        [CommandAction(command=[sys.executable, "-c", "print('x' * 20000); raise SystemExit(1)"])],
    )
    assert not result.ok and len(result.output_tail) <= TAIL_CHARS


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    result = run(
        tmp_path,
        [CommandAction(command=f"sleep 60 & echo $! > {pidfile}; wait", timeout_s=0.5)],
    )
    assert not result.ok and "timed out after 0.5s" in result.output_tail
    assert result.exit_code is not None and result.exit_code < 0  # killed by a signal
    grandchild = read_pid(pidfile)
    assert grandchild is not None
    wait_for(lambda: gone(grandchild), timeout=5, what="the background sleep to be killed")


def test_missing_program_fails_with_127(tmp_path: Path) -> None:
    result = run(tmp_path, [CommandAction(command=["no-such-program-for-jitgpu"])])
    assert not result.ok and result.exit_code == 127
    assert "cannot start" in result.output_tail


def test_unknown_profile_fails_with_a_clear_message(tmp_path: Path) -> None:
    result = run(tmp_path, None, profile="llm-70b")
    assert not result.ok
    assert "unknown warm-up profile 'llm-70b'" in result.output_tail
    assert "default, p" in result.output_tail


def test_cuda_context_warm_is_skipped_cleanly_without_a_driver(tmp_path: Path) -> None:
    result = run(tmp_path, [CudaContextAction()])
    assert result.ok, result.output_tail
    # Either this machine has no CUDA (skipped) or the fake uuids hide every real GPU.
    assert "cuda context warm skipped" in result.output_tail


def test_cuda_context_snippet_failure_fails_the_warmup(tmp_path: Path) -> None:
    result = run(tmp_path, [CudaContextAction(snippet="raise SystemExit(3)")])
    assert not result.ok and result.exit_code == 3


def test_stage_copies_files_and_folders_once(tmp_path: Path) -> None:
    src = tmp_path / "weights"
    (src / "shards").mkdir(parents=True)
    (src / "config.json").write_text("{}")
    (src / "shards" / "0.bin").write_bytes(b"\0" * 1024)
    single = tmp_path / "tokenizer.model"
    single.write_text("tok")
    actions = [StageAction(stage=str(src), dest="models/w"), StageAction(stage=str(single))]
    first = run(tmp_path, actions)
    cache = tmp_path / "cache"
    assert first.ok, first.output_tail
    assert (cache / "models/w/shards/0.bin").read_bytes() == b"\0" * 1024
    assert (cache / "tokenizer.model").read_text() == "tok"
    assert "staged 2 file(s), 0 already cached" in first.output_tail
    second = run(tmp_path, actions)
    assert "staged 0 file(s), 2 already cached" in second.output_tail


def test_stage_of_a_missing_source_fails(tmp_path: Path) -> None:
    result = run(tmp_path, [StageAction(stage=str(tmp_path / "nope"))])
    assert not result.ok and "does not exist" in result.output_tail


def test_stage_past_its_timeout_fails_without_copying_the_rest(tmp_path: Path) -> None:
    src = tmp_path / "weights"
    src.mkdir()
    for name in ("a.bin", "b.bin"):
        (src / name).write_bytes(b"w")
    # Readings: the warm-up's start, the stage's deadline base, then past the deadline.
    result = run(tmp_path, [StageAction(stage=str(src), timeout_s=5)], clock=Ticks([0, 0, 100]))
    assert not result.ok and result.exit_code is None
    assert f"stage: timed out after 5s copying {src}" in result.output_tail
    assert not (tmp_path / "cache" / "weights").exists()


@pytest.fixture
def http_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """A local HTTP server on 127.0.0.1 serving a folder: (its base URL, the folder)."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)  # 127.0.0.1 must be reached directly
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class _QuietHandler(SimpleHTTPRequestHandler):
    """Serves files without logging each request into the test output."""

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_stage_downloads_a_url_once(tmp_path: Path, http_files: tuple[str, Path]) -> None:
    base, root = http_files
    payload = bytes(range(256)) * 64
    (root / "model.bin").write_bytes(payload)
    action = StageAction(stage=f"{base}/model.bin", dest="models/model.bin")
    first = run(tmp_path, [action])
    assert first.ok, first.output_tail
    target = tmp_path / "cache" / "models" / "model.bin"
    assert target.read_bytes() == payload
    assert f"downloaded {len(payload)} bytes" in first.output_tail
    assert not target.with_name("model.bin.part").exists()
    (root / "model.bin").unlink()  # a second warm-up uses the cache, not the server
    second = run(tmp_path, [action])
    assert second.ok and "already cached" in second.output_tail


def test_stage_of_a_missing_url_fails_and_leaves_nothing(
    tmp_path: Path, http_files: tuple[str, Path]
) -> None:
    base, _ = http_files
    result = run(tmp_path, [StageAction(stage=f"{base}/nope.bin")])
    assert not result.ok
    assert f"stage: download of {base}/nope.bin failed" in result.output_tail
    assert "404" in result.output_tail
    assert list((tmp_path / "cache").iterdir()) == []


def test_cancel_stops_the_running_command(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    warmup = Warmup(
        "hold_2",
        "p",
        [CommandAction(command=f"echo $$ > {pidfile}; exec sleep 60")],
        gpu_uuids=GPUS,
        cache_dir=tmp_path,
        env=base_env(),
        clock=Ticks([0.0]),
    ).start()
    pid = wait_for(lambda: read_pid(pidfile), timeout=5, what="the warm-up to start")
    warmup.cancel()
    warmup.join(10)
    assert warmup.result is not None and warmup.result.cancelled and not warmup.result.ok
    assert gone(pid)


@pytest.mark.parametrize("cmd", [["true"], "true"])
def test_list_and_shell_commands(tmp_path: Path, cmd) -> None:  # type: ignore[no-untyped-def]
    assert run(tmp_path, [CommandAction(command=cmd)]).ok


class _FakeLibcuda:
    def __init__(self, rc: int) -> None:
        self.rc = rc

    def cuInit(self, flags: int) -> int:  # the driver API's name
        return self.rc


@pytest.mark.parametrize(
    ("rc", "why"),
    [(34, "CUDA_ERROR_STUB_LIBRARY"), (35, "CUDA_ERROR_INSUFFICIENT_DRIVER"), (100, "NO_DEVICE")],
)
def test_cuda_context_warm_skips_a_stub_or_too_old_driver_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], rc: int, why: str
) -> None:
    from control_plane.node_agent import cuda_warm

    monkeypatch.setattr(cuda_warm, "_with_torch", lambda: None)
    monkeypatch.setattr(cuda_warm.ctypes, "CDLL", lambda name: _FakeLibcuda(rc))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1111")
    assert cuda_warm.main() == 0
    out = capsys.readouterr().out
    assert out.startswith("cuda context warm skipped on GPU-1111: ") and why in out


def test_cuda_context_warm_fails_on_any_other_driver_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from control_plane.node_agent import cuda_warm

    monkeypatch.setattr(cuda_warm, "_with_torch", lambda: None)
    monkeypatch.setattr(cuda_warm.ctypes, "CDLL", lambda name: _FakeLibcuda(999))
    assert cuda_warm.main() == 1
    assert "cuInit failed with CUDA error 999" in capsys.readouterr().out
