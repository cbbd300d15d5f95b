"""Reading the coordinator's live state from the scrape thread: /metrics renders off the core loop
(dashboard/app.py), so a collector's read of a dict the core is changing can meet it mid-resize."""

from __future__ import annotations

from typing import Callable, TypeVar

T = TypeVar("T")


def live(read: Callable[[], T], attempts: int = 5) -> T:
    """`read()`, again if what it walks changed under it: a dict or set resized (RuntimeError), or
    an entry gone between a list of keys and the dict they index (KeyError, e.g. a worker that
    left: WorkerRegistry.all). A read that keeps failing raises its last error."""
    for _ in range(attempts - 1):
        try:
            return read()
        except (RuntimeError, KeyError):
            continue
    return read()
