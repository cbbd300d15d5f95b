"""WatchJob on the edge loop, its events pushed from the core as they are published.

Hopped to the core like the other RPCs (coordinator/edge/hop.py), a watch's generator woke on the
core only after the turn that published the event had run its other callbacks (the rest of the
input, the turn's commit, the placement pass), and its item then crossed back in one more core
turn: on 2 x H200, 1.1 ms from a warm job's end to the client's end of its watch. Here the core
only registers the watch and reads the stored events (one hop); later events are handed to the
edge from EventBus.publish (`Handover`: once per turn of the core, the terminal one at once) and
written from the edge's own queue."""

from __future__ import annotations

import asyncio
from typing import Callable

from coordinator.core.events import is_terminal, until_terminal
from coordinator.shell.facade import Coordinator
from coordinator.edge import identity, usecases
from coordinator.edge.hop import client, on
from coordinator.edge.servicers import abort_with
from ringleader.errors import RingleaderError
from ringleader.v1 import jobs_pb2 as pb


class EdgeWatch:
    """`flush`: on the core, what a write calls before it answers (the edge read view's update)."""

    def __init__(self, coordinator: Coordinator, core: asyncio.AbstractEventLoop,
                 flush: Callable[[], None] = lambda: None) -> None:
        self.c, self.core, self.flush = coordinator, core, flush

    async def WatchJob(self, request, context):
        """The job's stored events, then live ones, until its terminal state (on the edge loop)."""
        queue: asyncio.Queue = asyncio.Queue()
        deliver = Handover(self.core, asyncio.get_running_loop(), queue)

        async def follow():  # on the core: the bus and the store are its alone
            return self.c.events.follow(request.job_id, deliver)
        try:
            identity.caller_may_use_jobs(context)
            stored, stop = await on(self.core, follow(), client(context))
        except RingleaderError as exc:
            await abort_with(context, exc)
        try:
            async for event in until_terminal(stored, queue):
                yield event
        finally:
            _call_soon(self.core, stop)

    async def SubmitAndWatchJob(self, request, context):
        """SubmitJob, then WatchJob's stream of the new job, in one call (on the edge loop): the
        job is acknowledged by SubmitJob's own use case (coordinator/edge/usecases.py), and its
        watch is registered in the submit's own turn of the core, so no event falls between the
        two. A client that
        submits and then watches paid a second call on the job's path: its accept on the edge and
        its hop to the core, while the job's assignments went out."""
        queue: asyncio.Queue = asyncio.Queue()
        deliver = Handover(self.core, asyncio.get_running_loop(), queue)

        watched: list = []  # (stored events, stop), from the submit's own turn of the core

        def follow(job: pb.Job):
            watched.append(self.c.events.follow(job.id, deliver))
            return watched[0][1]

        async def submit():  # on the core, as SubmitJob's body is
            job = await usecases.submit(self.c, request.spec, request.request_id, accepted=follow)
            self.flush()
            # The answer waits a turn: the job's assignments (queued for the end of this turn,
            # worker_stream.Outgoing) cross to the edge first, and the edge writes them to the
            # workers before it writes this answer to the client, which is not on the job's path.
            await asyncio.sleep(0)
            return self.c.get(job.id), *watched[0]
        try:
            identity.caller_may_use_jobs(context)
            job, stored, stop = await on(self.core, submit(), client(context))
        except RingleaderError as exc:
            await abort_with(context, exc)
        try:
            yield pb.SubmitWatchUpdate(accepted=job)
            async for event in until_terminal(stored, queue):
                yield pb.SubmitWatchUpdate(event=event)
        finally:
            _call_soon(self.core, stop)


class Handover:
    """A watch's `deliver` (EventBus.follow): on the core, inside EventBus.publish, each event is
    put in the watch's edge queue, one hand-over per turn of the core. A hand-over per event woke
    the edge in the middle of the core's turn: a warm job's result event, recorded a moment before
    its SUCCEEDED in the same input, had the edge take the GIL and write it to the client while
    the core waited to end the job. The terminal event (or None: the bus closes) goes at once,
    with what waits before it."""

    def __init__(self, core: asyncio.AbstractEventLoop, edge: asyncio.AbstractEventLoop,
                 queue: asyncio.Queue) -> None:
        self.core, self.edge, self.queue = core, edge, queue
        self._pending: list = []

    def __call__(self, event) -> None:
        self._pending.append(event)
        if event is None or is_terminal(event):
            self.flush()
        elif len(self._pending) == 1:
            self.core.call_soon(self.flush)  # at the end of this turn, with the rest of its events

    def flush(self) -> None:
        if self._pending:
            batch, self._pending = self._pending, []
            _call_soon(self.edge, _put_all, self.queue, batch)


def _put_all(queue: asyncio.Queue, batch: list) -> None:
    for event in batch:
        queue.put_nowait(event)


def _call_soon(loop: asyncio.AbstractEventLoop, fn, *args) -> None:
    """`fn(*args)` on the other loop; nothing if it is closed (stopping: what it served went with it)."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        pass
