"""The largest request body the REST API reads: refused with 413 before it is read whole.

A request announcing a larger Content-Length is answered at once, without reading a byte of its
body; one that streams (chunked, or a Content-Length that lies) is cut off as soon as what it
sent passes the limit. Most routes take small JSON (1 MiB, far above any job spec); a baselines
import carries a whole table (100,000 entries are about 17 MB: 32 MiB). Before this limit, a
100 MB body was read and parsed into coordinator memory (73 -> 583 MiB) and stalled every call.

Bodies in flight are bounded too, in all (BUDGET) and per client address (PER_CLIENT): a body
counts from its first byte (or its announced length) until its route has answered, since what it
parses into lives that long. A request that would pass either bound is answered 429 with
Retry-After, once its body is read and dropped a chunk at a time (answered before that, a
client still sending sees its connection reset in place of the answer; dropping holds no memory). One route's largest body
always fits both, so a lone import is never refused. Without this, each of many concurrent
imports under the per-route limit was read and parsed at once.
"""

from __future__ import annotations

import collections
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dashboard.asgi import HttpMiddleware

DEFAULT_MAX_BODY = 1 << 20
# Routes that take more, by path (exact): a table import is the only large input.
LARGER = {"/api/v1/baselines/import": 32 << 20}
# Bytes of request bodies in flight: in all, and from one client address. Each at least the
# largest route limit; 12 concurrent 30 MB imports then stay under 600 MB of coordinator RSS.
BUDGET = 48 << 20
PER_CLIENT = 32 << 20
RETRY_AFTER_S = 2


class BodyLimit(HttpMiddleware):
    def __init__(self, app: ASGIApp, limits: dict[str, int] | None = None, default: int = DEFAULT_MAX_BODY,
                 budget: int = BUDGET, per_client: int = PER_CLIENT) -> None:
        super().__init__(app)
        self.limits, self.default = LARGER if limits is None else limits, default
        largest = max([default, *self.limits.values()])
        self.budget, self.per_client = max(budget, largest), max(per_client, largest)
        self.in_flight = 0
        self.by_client: collections.Counter[str] = collections.Counter()

    def _take(self, client: str, more: int) -> bool:
        """Count `more` bytes of a body if both budgets allow."""
        if self.in_flight + more > self.budget or self.by_client[client] + more > self.per_client:
            return False
        self.in_flight += more
        self.by_client[client] += more
        return True

    def _give_back(self, client: str, held: int) -> None:
        self.in_flight -= held
        self.by_client[client] -= held
        if self.by_client[client] <= 0:
            del self.by_client[client]

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.limits.get(scope["path"].rstrip("/"), self.default)
        announced = _content_length(scope)
        if announced is not None and announced > limit:
            await _refuse(send, limit, announced)
            return
        client = (scope.get("client") or ("",))[0]
        held = announced or 0
        if not self._take(client, held):
            await _drain(receive)
            await _busy(send)
            return
        seen, started, refused = 0, False, False

        async def counted() -> Message:
            nonlocal seen, refused, held
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if refused:
                    return {"type": "http.disconnect"}
                if seen > limit:
                    refused = True
                    if not started:
                        await _refuse(send, limit, None)
                    # The app sees the client gone (an exception here would be its 400), and
                    # stops reading; what it answers is dropped below.
                    return {"type": "http.disconnect"}
                if seen > held:  # streamed, or longer than announced: counted as it comes
                    if not self._take(client, seen - held):
                        refused = True
                        if not started:
                            await _busy(send)
                        return {"type": "http.disconnect"}
                    held = seen
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        finally:
            self._give_back(client, held)


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


async def _busy(send: Send) -> None:
    body = json.dumps({"detail": "request bodies: too many bytes in flight now (from this client or in all); "
                                 f"retry in {RETRY_AFTER_S} s"}).encode()
    await send({"type": "http.response.start", "status": 429,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"retry-after", str(RETRY_AFTER_S).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


async def _drain(receive: Receive) -> None:
    """Read a request's body to its end, keeping none of it."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
