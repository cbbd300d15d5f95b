"""The HTTP side of a standby coordinator (coordinator/edge/standby.py is its gRPC side): alive
(/healthz 200) but not ready (/readyz 503 "standby, leader is ADDRESS"), so a Kubernetes Service
sends traffic only to the leader; /metrics says who leads. No API, no UI: it holds no state."""

from __future__ import annotations

from typing import Callable

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse, Response

from coordinator.edge.standby import standby_message


def create_standby_app(leader: Callable[[], str], render_metrics: Callable[[], tuple[bytes, str]]) -> FastAPI:
    app = FastAPI(title="ringleader (standby)", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/healthz", response_class=PlainTextResponse)
    def healthz() -> str:
        return "ok"

    @app.get("/readyz", response_class=PlainTextResponse)
    def readyz() -> Response:
        return PlainTextResponse(standby_message(leader()), status_code=503)

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> Response:
        body, content_type = render_metrics()
        return Response(body, media_type=content_type)

    return app
