"""Watching files: watchdog observers (polling as a fallback) and a tailer per file."""

from smart_agent.watch.paths import DEFAULT_EXCLUDE, WatchSpec, is_network_fs
from smart_agent.watch.tailer import CAUGHT_UP, REWOUND, FileTailer, TailStats
from smart_agent.watch.watcher import Watcher, WatchStats

__all__ = [
    "CAUGHT_UP",
    "DEFAULT_EXCLUDE",
    "REWOUND",
    "FileTailer",
    "TailStats",
    "WatchSpec",
    "WatchStats",
    "Watcher",
    "is_network_fs",
]
