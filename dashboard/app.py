"""The FastAPI application: REST API (/api/v1), web UI (/), health and /metrics, behind the
guard (dashboard/guard.py: tokens, cross-origin refusals, CSP)."""

from __future__ import annotations

import asyncio
from typing import Callable

from fastapi import FastAPI, Security
from fastapi.responses import PlainTextResponse, Response

from coordinator.shell.facade import Coordinator
from coordinator.edge.metrics import CoordinatorMetrics
from coordinator.edge.auth import USERS, Access
from coordinator.edge.identity import WorkerIdentities
from dashboard import api, baselines_api, bearer, fleet_api, fleet_view, identity_api, trends_api, ui
from dashboard.bearer import BEARER
from dashboard.guard import Guard, GuardConfig
from dashboard.body_limit import BodyLimit
from dashboard.edge_http import CoreHop
from dashboard.http_metrics import HttpMetrics, HttpMetricsMiddleware
from dashboard.reads import Reads


def create_app(core: Coordinator, metrics: CoordinatorMetrics, guard: GuardConfig | None = None,
               identities: WorkerIdentities | None = None, reads: Reads | None = None,
               core_loop: asyncio.AbstractEventLoop | None = None,
               flush: Callable[[bool], None] | None = None) -> FastAPI:
    """Served on the calling loop, or, with `core_loop`, on the gRPC edge's (dashboard/edge_http.py):
    then its routes other than the reads run on `core_loop`, each write calling `flush` there
    before it answers, and the reads come from `reads` (the edge's read view, dashboard/reads.py)."""
    # No /docs or /redoc: their pages load scripts from a CDN and run inline code, which the
    # CSP refuses (and which an offline cluster cannot fetch); /openapi.json stays.
    app = FastAPI(title="ringleader", version="1", description="Orchestrate GPU collective jobs.",
                  docs_url=None, redoc_url=None)
    if core_loop is not None:  # innermost: the guard, the limits and the metrics stay on the edge
        app.add_middleware(CoreHop, core=core_loop, flush=flush or (lambda workers: None))
    app.add_middleware(BodyLimit)  # inside the guard and the metrics: a refused body is counted
    guard = guard or GuardConfig(Access(), any_host=False)
    app.add_middleware(Guard, config=guard)
    # Outermost (added last), on the coordinator's registry: /metrics shows REST next to gRPC,
    # refused requests included. One app per registry.
    app.add_middleware(HttpMetricsMiddleware, metrics=HttpMetrics(metrics.registry))
    # Every API router declares the users' bearer scheme in OpenAPI (the guard checks it).
    feed = fleet_view.FleetFeed(core)
    for router in (api.router(core, reads=reads), fleet_api.router(core), fleet_view.router(feed),
                   baselines_api.router(core), identity_api.router(core, identities or WorkerIdentities(core.store)),
                   trends_api.router(core)):
        app.include_router(router, dependencies=[Security(BEARER)])
    # The overview preloads the fleet's first answer where the API is open (a token would be missing from it).
    ui.mount(app, preload=() if guard.access.needs_token(USERS) else (fleet_view.FIRST,))

    @app.get("/healthz", response_class=PlainTextResponse, tags=["health"])
    def healthz() -> str:
        return "ok"

    @app.get("/readyz", response_class=PlainTextResponse, tags=["health"])
    def readyz() -> str:
        return "ready"

    @app.get("/metrics", tags=["metrics"], response_class=PlainTextResponse)
    async def prometheus_metrics() -> Response:  # on the loop: reads the coordinator's live state
        await metrics.trends.prefetch()  # the store's part, read off the loop
        body, content_type = await metrics.render_off_loop()
        return Response(body, media_type=content_type)

    # Built here, once, with every route in place: built on the first GET /openapi.json it kept
    # that request waiting 2 s, on the coordinator's loop.
    schema = bearer.optional(app.openapi())
    app.openapi = lambda: schema  # type: ignore[method-assign]
    return app
