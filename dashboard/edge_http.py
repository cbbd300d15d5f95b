"""The HTTP server on the edge loop: the REST reads answered there, from the edge's read view
(dashboard/reads.py, coordinator/edge/read_view.py), every other route run on the core loop.

Why: served on the core's loop, every REST request waited out whatever held that loop (3 or 8 s
of a blocked core: the whole block for a GET /api/v1/jobs/{id}). Here uvicorn's sockets, the
parsing, the gzip (dashboard/server.py) and the app's own middleware (metrics, the guard, body
limits: dashboard/app.py) run on the edge loop; `CoreHop`, the innermost middleware, lets a read
route (GET or HEAD of READ_PATHS) run there too: its handler reads the view. Any other route runs
on the core loop, as before, its `receive` and `send` hopped back to the edge (coordinator/edge/
hop.py's `on`: one call_soon_threadsafe each way a message, the response's head with its first
body), in its client's turn of the core's lane; before its response starts, the core hands the read view what the request changed (so a
client's read after its own write sees it)."""

from __future__ import annotations

import asyncio
import re
from typing import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator.edge.hop import on

# The reads answered on the edge: they use only the read view (dashboard/api.py's `reads`).
READ_PATHS = re.compile(r"^/api/v1/(jobs|jobs/[^/]+|workers)/?$")


def is_read(scope: Scope) -> bool:
    return scope["type"] == "http" and scope["method"] in ("GET", "HEAD") and bool(READ_PATHS.match(scope["path"]))


class CoreHop:
    """The innermost middleware of an app served on the edge loop: the routes of reads run on
    the edge, the others on `core`. `flush(workers)`, on the core: hand the read view the
    changes (coordinator/edge/read_feed.py's ReadFeed.flush)."""

    def __init__(self, app: ASGIApp, core: asyncio.AbstractEventLoop, flush: Callable[[bool], None]) -> None:
        self.app, self.core, self.flush = app, core, flush

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or is_read(scope):
            await self.app(scope, receive, send)
            return
        edge = asyncio.get_running_loop()
        workers = "/workers" in scope.get("path", "")

        async def receive_core() -> Message:
            return await on(edge, receive())

        start: list[Message] = []  # the response's head, sent with its first body (one write, one hop)

        async def send_both(head: list[Message], message: Message) -> None:  # on the edge
            for m in (*head, message):
                await send(m)

        async def send_core(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.flush(workers)  # the view first: the edge runs it before the response
                start.append(message)
                return
            head = start[:]
            start.clear()
            await on(edge, send_both(head, message))

        await on(self.core, self.app(scope, receive_core, send_core), _client(scope))


def _client(scope: Scope) -> str:
    """The lane's turn (coordinator/edge/hop.py's Lane): the request's connection."""
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else ""
