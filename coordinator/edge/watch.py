"""WatchJob on the edge loop, its events pushed from the core as they are published.

Hopped to the core like the other RPCs (coordinator/edge/hop.py), a watch's generator woke on the
core only after the turn that published the event had run its other callbacks (the rest of the
input, the turn's commit, the placement pass), and its item then crossed back in one more core
turn: on 2 x H200, 1.1 ms from a warm job's end to the client's end of its watch. Here the core
only registers the watch and reads the stored events (one hop); each later event is handed to the
edge inside EventBus.publish (call_soon_threadsafe) and written from the edge's own queue."""

from __future__ import annotations

import asyncio

from coordinator.core.events import until_terminal
from coordinator.core.facade import Coordinator
from coordinator.edge import identity
from coordinator.edge.hop import client, on
from coordinator.edge.servicers import abort_with
from ringleader.errors import RingleaderError


class EdgeWatch:
    def __init__(self, coordinator: Coordinator, core: asyncio.AbstractEventLoop) -> None:
        self.c, self.core = coordinator, core

    async def WatchJob(self, request, context):
        """The job's stored events, then live ones, until its terminal state (on the edge loop)."""
        edge, queue = asyncio.get_running_loop(), asyncio.Queue()

        def deliver(event) -> None:  # on the core, inside EventBus.publish
            _call_soon(edge, queue.put_nowait, event)

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


def _call_soon(loop: asyncio.AbstractEventLoop, fn, *args) -> None:
    """`fn(*args)` on the other loop; nothing if it is closed (stopping: what it served went with it)."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        pass
