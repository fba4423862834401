"""Pure scheduling core: placement, quotas, fair share, preemption, transitions (no I/O)."""
