"""Job events: recorded, published, watched.

Recorded events (state changes and results) get the job's next sequence number and are stored
before anyone hears of them; live-only events (progress, a queued job's new waiting reason) are
published with seq 0 and never stored. Watchers of a job get its stored events, then live ones,
until the terminal state; listeners (metrics, the REST live stream) hear every event, on the
coordinator's loop, and must not block. The control core collects the events one input caused
(`drain`) to return them with its sends; the shell tells watchers and listeners (`tell`) once
the input's writes are applied.
"""

from __future__ import annotations

import asyncio
import logging
from typing import AsyncIterator, Callable

from coordinator.core.clock import Clock, SystemClock
from coordinator.store.api import JobStore
from ringleader import states
from ringleader.v1 import jobs_pb2 as pb

log = logging.getLogger("ringleader.coordinator")

Listener = Callable[[pb.JobEvent, pb.Job], None]
Deliver = Callable[[pb.JobEvent | None], None]  # a follower of one job's events (EventBus.follow)


def is_terminal(event: pb.JobEvent) -> bool:
    return event.WhichOneof("event") == "state" and states.is_terminal(event.state.state)


async def until_terminal(stored: list, queue: asyncio.Queue) -> AsyncIterator[pb.JobEvent]:
    """A watch's events: `stored` (replayed), then those `queue` receives (live; None ends it)
    that were not among them, up to the terminal state."""
    last = -1
    for event in stored:
        last = event.seq
        yield event
        if is_terminal(event):
            return
    while (event := await queue.get()) is not None:
        if event.seq and event.seq <= last:
            continue  # recorded while the stored ones were read
        yield event
        if is_terminal(event):
            return


class EventBus:
    def __init__(self, store: JobStore, clock: Clock | None = None) -> None:
        self.store = store
        self.clock = clock or SystemClock()  # a control core gives its own: the time of the input applied
        self._watchers: dict[str, set[Deliver]] = {}  # per job, its followers' `deliver` (follow)
        self._listeners: list[Listener] = []
        self._next_seq: dict[str, int] = {}
        self._emitted: list[tuple[pb.JobEvent, pb.Job]] = []  # published since the last drain

    def add_listener(self, fn: Listener) -> None:
        self._listeners.append(fn)

    def created(self, job_id: str) -> None:
        """A job this process has just created has no stored events: its first is 1, without the
        read of the job's stored events `record` makes for a job it has not seen (two statements
        in the submit's call)."""
        self._next_seq[job_id] = 1

    def record(self, event: pb.JobEvent, job: pb.Job) -> None:
        """Store `event` with the job's next sequence number, then publish it."""
        if event.job_id not in self._next_seq:
            stored = self.store.events(event.job_id)
            self._next_seq[event.job_id] = (stored[-1].seq + 1) if stored else 1
        event.seq = self._next_seq[event.job_id]
        self._next_seq[event.job_id] += 1
        event.time = self.clock.wall
        self.store.add_event(event)
        self.publish(event, job)
        if is_terminal(event):
            self._next_seq.pop(event.job_id, None)

    def publish(self, event: pb.JobEvent, job: pb.Job) -> None:
        """Keep `event` for watchers and listeners, without storing (progress, waiting reasons):
        they hear of it from `tell`, after the input (the control core calls nobody)."""
        event.time = event.time or self.clock.wall
        self._emitted.append((event, job))

    def drain(self) -> list[tuple[pb.JobEvent, pb.Job]]:
        """The events published since the last call, with their jobs."""
        out, self._emitted = self._emitted, []
        return out

    def tell(self, events: list[tuple[pb.JobEvent, pb.Job]]) -> None:
        """The shell's half: watchers and listeners hear of an input's events, in order."""
        for event, job in events:
            for deliver in self._watchers.get(event.job_id, ()):
                deliver(event)
            for fn in self._listeners:
                try:
                    fn(event, job)
                except Exception:  # an observer's bug must not break the job's lifecycle
                    log.exception("job event listener failed")

    async def watch(self, job_id: str) -> AsyncIterator[pb.JobEvent]:
        """Stored events, then live ones, until the job reaches a terminal state."""
        queue: asyncio.Queue = asyncio.Queue()
        stored, stop = self.follow(job_id, queue.put_nowait)  # NotFound for an unknown job
        try:
            async for event in until_terminal(stored, queue):
                yield event
        finally:
            stop()

    def follow(self, job_id: str, deliver: Deliver) -> tuple[list, Callable[[], None]]:
        """(the job's stored events, stop): `deliver` is then called with each event published
        for the job, as it is published, on this loop, and with None when the bus closes; it
        must not block (a watch on another loop hands the event over: coordinator/edge/watch.py).
        An event handed over is never changed after: it may be read on another thread."""
        stored = self.store.events(job_id)  # NotFound for an unknown job (before anything is registered)
        self._watchers.setdefault(job_id, set()).add(deliver)

        def stop() -> None:
            watchers = self._watchers.get(job_id)
            if watchers is not None:
                watchers.discard(deliver)
                if not watchers:
                    del self._watchers[job_id]
        return stored, stop

    def close(self) -> None:
        """End every watch (the coordinator is stopping)."""
        for followers in self._watchers.values():
            for deliver in followers:
                deliver(None)
