"""The largest request body the REST API reads: refused with 413 before it is read whole.

A request announcing a larger Content-Length is answered at once, without reading a byte of its
body; one that streams (chunked, or a Content-Length that lies) is cut off as soon as what it
sent passes the limit. Most routes take small JSON (1 MiB, far above any job spec); a baselines
import carries a whole table (100,000 entries are about 17 MB: 32 MiB). Before this limit, a
100 MB body was read and parsed into coordinator memory (73 -> 583 MiB) and stalled every call.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dashboard.asgi import HttpMiddleware

DEFAULT_MAX_BODY = 1 << 20
# Routes that take more, by path (exact): a table import is the only large input.
LARGER = {"/api/v1/baselines/import": 32 << 20}


class BodyLimit(HttpMiddleware):
    def __init__(self, app: ASGIApp, limits: dict[str, int] | None = None, default: int = DEFAULT_MAX_BODY) -> None:
        super().__init__(app)
        self.limits, self.default = LARGER if limits is None else limits, default

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.limits.get(scope["path"].rstrip("/"), self.default)
        announced = _content_length(scope)
        if announced is not None and announced > limit:
            await _refuse(send, limit, announced)
            return
        seen, started, refused = 0, False, False

        async def counted() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit and not refused:
                    refused = True
                    if not started:
                        await _refuse(send, limit, None)
                    # The app sees the client gone (an exception here would be its 400), and
                    # stops reading; what it answers is dropped below.
                    return {"type": "http.disconnect"}
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, counted, watched)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server (h11) refuses a malformed one before we see it
    return None


async def _refuse(send: Send, limit: int, announced: int | None) -> None:
    size = f"{announced} bytes" if announced is not None else "more than that"
    body = json.dumps({"detail": f"request body: at most {limit} bytes on this route, got {size}"}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
