"""REST and web UI request metrics: a pure ASGI middleware on the coordinator's metrics registry.

Labels are low-cardinality: the HTTP method, the route *template* the router matched
(`/api/v1/jobs/{job_id}`, never the raw path with its id), and the status code. Requests that
matched no route (404s for random paths, scanners) share the route label "unmatched"; static
files share their mount's prefix. Server-Sent Event streams live as long as a browser tab, so, as
with the long-lived gRPC streams, they are counted but not timed.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry
from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator.edge.rpc_metrics import latency_and_count
from dashboard.asgi import HttpMiddleware

UNMATCHED = "unmatched"
FAMILIES = (  # (name, help) of the latency histogram and of the request counter
    ("ringleader_http_server_request_duration_seconds",
     "Time from an HTTP request to the end of its response (event streams excluded)"),
    ("ringleader_http_server_requests_total", "HTTP requests answered, event streams included"),
)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class HttpMetrics:
    """The two families; one instance per registry."""

    LABELS = ["method", "route", "status"]

    def __init__(self, registry: CollectorRegistry) -> None:
        self.duration, self.requests = latency_and_count(registry, self.LABELS, *FAMILIES)


class HttpMetricsMiddleware(HttpMiddleware):
    """Add with `app.add_middleware(HttpMetricsMiddleware, metrics=HttpMetrics(registry))`."""

    def __init__(self, app: ASGIApp, metrics: HttpMetrics) -> None:
        super().__init__(app)
        self.metrics = metrics

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        status = 500  # what the client gets when the app raises before it answers
        streaming = False

        async def send_and_watch(message: Message) -> None:
            nonlocal status, streaming
            if message["type"] == "http.response.start":
                status = message["status"]
                streaming = _content_type(message).startswith(b"text/event-stream")
            await send(message)

        try:
            await self.app(scope, receive, send_and_watch)
        finally:
            method = scope["method"] if scope["method"] in METHODS else "OTHER"
            labels = (method, route_template(scope), str(status))
            self.metrics.requests.labels(*labels).inc()
            if not streaming:
                self.metrics.duration.labels(*labels).observe(time.perf_counter() - start)


def route_template(scope: Scope) -> str:
    """The path template of the route that handled the request (the router records it in the
    scope), the prefix of the mount that did (static files), else UNMATCHED."""
    route = scope.get("route")
    if route is not None and not isinstance(route, Mount):
        return getattr(route, "path", UNMATCHED)
    # A mount moves its prefix from the path into root_path; the router may not record it.
    prefix = scope.get("root_path", "")[len(scope.get("app_root_path", "")):]
    return prefix + "/*" if prefix else UNMATCHED


def _content_type(message: Message) -> bytes:
    for name, value in message.get("headers", ()):
        if name.lower() == b"content-type":
            return value
    return b""
