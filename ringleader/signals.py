"""SIGINT/SIGTERM for a process whose event loop runs in its main thread (coordinator, worker
daemon, demo).

Not loop.add_signal_handler: asyncio learns of a signal from a byte in its self-pipe, the same
pipe every call_soon_threadsafe writes a byte to. A loop fed from other threads (the gRPC edge
loop's hops, 2,000 worker streams, executors' readers) can fill that pipe while it is busy; the
signal's byte is then dropped ("Exception ignored when trying to write to the signal wakeup fd:
BlockingIOError") and the signal is lost: a coordinator did not stop within 60 s of SIGTERM at
the end of two 2,000-worker bench runs on PostgreSQL. Python's own
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


async def unless_set(stop: asyncio.Event, work):
    """`work`'s result, or None as soon as `stop` is set (`work` then cancelled): a stop signal
    ends a wait at once, not when the wait would have ended."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if task.done():
        return task.result()
    task.cancel()
    return None
