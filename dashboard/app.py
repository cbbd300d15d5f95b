"""The FastAPI application: REST API (/api/v1), web UI (/), health and /metrics, behind the
guard (dashboard/guard.py: tokens, cross-origin refusals, CSP)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse, Response

from coordinator.service import Coordinator
from coordinator.metrics import CoordinatorMetrics
from coordinator.auth import Access
from dashboard import api, baselines_api, fleet_view, ui
from dashboard.guard import Guard, GuardConfig
from dashboard.http_metrics import HttpMetrics, HttpMetricsMiddleware


def create_app(core: Coordinator, metrics: CoordinatorMetrics, guard: GuardConfig | None = None) -> FastAPI:
    # No /docs or /redoc: their pages load scripts from a CDN and run inline code, which the
    # CSP refuses (and which an offline cluster cannot fetch); /openapi.json stays.
    app = FastAPI(title="ringleader", version="1", description="Orchestrate GPU collective jobs.",
                  docs_url=None, redoc_url=None)
    app.add_middleware(Guard, config=guard or GuardConfig(Access(), any_host=False))
    # Outermost (added last), on the coordinator's registry: /metrics shows REST next to gRPC,
    # refused requests included. One app per registry.
    app.add_middleware(HttpMetricsMiddleware, metrics=HttpMetrics(metrics.registry))
    app.include_router(api.router(core))
    app.include_router(fleet_view.router(core))
    app.include_router(baselines_api.router(core))
    ui.mount(app)

    @app.get("/healthz", response_class=PlainTextResponse, tags=["health"])
    def healthz() -> str:
        return "ok"

    @app.get("/readyz", response_class=PlainTextResponse, tags=["health"])
    def readyz() -> str:
        return "ready"

    @app.get("/metrics", tags=["metrics"], response_class=PlainTextResponse)
    async def prometheus_metrics() -> Response:  # on the loop: reads the coordinator's live state
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    return app
