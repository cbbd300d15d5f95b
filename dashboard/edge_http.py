"""The HTTP server on the edge loop: the REST reads answered there, from the edge's read view
(dashboard/reads.py, coordinator/edge/read_view.py), every other request handed to the core loop.

Why: served on the core's loop, every REST request waited out whatever held that loop (3 or 8 s
of a blocked core: the whole block for a GET /api/v1/jobs/{id}). Here uvicorn's sockets, the
parsing and the gzip (dashboard/server.py) run on the edge loop. A read route (GET or HEAD of
READ_PATHS) runs the app there: its handler reads the view. Any other request runs the same app
on the core loop, as before, its `receive` and `send` hopped back to the edge (coordinator/edge/
hop.py's `on`: one call_soon_threadsafe each way a message), in its client's turn of the core's
lane; before its response starts, the core hands the read view what the request changed (so a
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


class EdgeSplit:
    """`app` (one FastAPI app, with its middleware: guard, limits, metrics) served on the edge
    loop for reads and on `core` for the rest. `flush(workers)`, on the core: hand the read view
    the changes (coordinator/edge/read_feed.py's ReadFeed.flush)."""

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

        async def send_core(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.flush(workers)  # the view first: the edge runs it before the response
            await on(edge, send(message))

        await on(self.core, self.app(scope, receive_core, send_core), _client(scope))


def _client(scope: Scope) -> str:
    """The lane's turn (coordinator/edge/hop.py's Lane): the request's connection."""
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else ""
