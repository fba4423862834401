"""The GPU-node daemon: NVML adapter (or simulated GPUs), warm-up runner, heartbeat loop."""
