"""SIGINT/SIGTERM for a process whose event loop runs in its main thread (coordinator, worker
daemon, demo).

Not loop.add_signal_handler: asyncio learns of a signal from a byte in its self-pipe, the same
pipe every call_soon_threadsafe writes a byte to. A loop fed from other threads (the gRPC edge
loop's hops, 2,000 worker streams, executors' readers) can fill that pipe while it is busy; the
signal's byte is then dropped ("Exception ignored when trying to write to the signal wakeup fd:
BlockingIOError") and the signal is lost: a coordinator did not stop within 60 s of SIGTERM at
the end of two 2,000-worker bench runs (docs/results/2026-11-26-postgres-r4, -r5). Python's own
handler runs in the main thread whatever that pipe holds, and queues the callback on the loop.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Callable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def on_stop_signals(loop: asyncio.AbstractEventLoop, callback: Callable[[], object]) -> None:
    """Run `callback` on `loop` (in its next turn) at each SIGINT or SIGTERM. Call it from the
    main thread, which must be `loop`'s."""
    def handler(signum, frame) -> None:
        loop.call_soon_threadsafe(callback)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
