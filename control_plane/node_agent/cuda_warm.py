"""Create a CUDA context on every visible GPU (run as a script); exits 0 with a note if no CUDA.

Run by the warm-up runner as `python cuda_warm.py` with CUDA_VISIBLE_DEVICES set. It loads
the driver and touches each device, which is what makes the job's first CUDA call fast. It uses
torch when it is installed and sees a GPU, else the driver API through ctypes. It imports
nothing of jitgpu, so any interpreter can run it.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

CUDA_ERROR_NO_DEVICE = 100
# cuInit answers that mean "no usable CUDA here", not "this GPU is broken": skip the warm.
SKIP_REASONS = {
    34: "libcuda is a stub library, not a real driver (CUDA_ERROR_STUB_LIBRARY)",
    35: "the installed driver is older than this CUDA needs (CUDA_ERROR_INSUFFICIENT_DRIVER)",
    CUDA_ERROR_NO_DEVICE: "no CUDA device (CUDA_ERROR_NO_DEVICE)",
}


class Skip(Exception):
    """No usable CUDA on this host: nothing to warm, which is not a failure."""


def _with_torch() -> int | None:
    try:
        import torch
    except Exception:
        return None
    if not torch.cuda.is_available():
        return None
    count = torch.cuda.device_count()
    for i in range(count):
        torch.ones(1, device=f"cuda:{i}").add_(1).sum().item()
    torch.cuda.synchronize()
    return count


def _with_driver() -> int:
    """Device count after a context on each; raises Skip when there is no usable CUDA."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        raise Skip("no CUDA driver (libcuda.so.1 not found)") from None
    rc = cuda.cuInit(0)
    if rc in SKIP_REASONS:
        raise Skip(SKIP_REASONS[rc])
    if rc != 0:
        raise RuntimeError(f"cuInit failed with CUDA error {rc}")
    count = ctypes.c_int(0)
    _check(cuda.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    for ordinal in range(count.value):
        device = ctypes.c_int(0)
        _check(cuda.cuDeviceGet(ctypes.byref(device), ordinal), "cuDeviceGet")
        context = ctypes.c_void_p()
        _check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "context")
        _check(cuda.cuDevicePrimaryCtxRelease(device), "cuDevicePrimaryCtxRelease")
    return count.value


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what} failed with CUDA error {rc}")


def main() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "(all)")
    start = time.monotonic()
    try:
        count = _with_torch()
        how = "torch"
        if count is None:
            count, how = _with_driver(), "the driver API"
    except Skip as exc:
        print(f"cuda context warm skipped on {visible}: {exc}", flush=True)
        return 0
    except Exception as exc:
        print(f"cuda context warm failed on {visible}: {exc}", flush=True)
        return 1
    if not count:
        print(f"cuda context warm skipped on {visible}: no CUDA device visible", flush=True)
        return 0
    took = time.monotonic() - start
    print(f"cuda context warm: {count} device(s) via {how} in {took:.2f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
