"""The web UI: one static page (plain JS, uPlot vendored under static/vendor) on top of /api/v1.

`/` (fleet and jobs) and `/jobs/{id}` (a job's charts and results table) both serve index.html;
the page routes on location.pathname. Everything it needs is served from here, so it works
without internet access.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import Scope

STATIC_DIR = Path(__file__).parent / "static"
INDEX = STATIC_DIR / "index.html"

# The files are small and change with every release: browsers revalidate them (ETag) on each
# load, so a page never runs with a stale app.js.
_NO_CACHE = {"Cache-Control": "no-cache"}


class _RevalidatedStaticFiles(StaticFiles):
    async def get_response(self, path: str, scope: Scope):
        response = await super().get_response(path, scope)
        response.headers.update(_NO_CACHE)
        return response


def mount(app: FastAPI) -> None:
    def index() -> FileResponse:
        return FileResponse(INDEX, media_type="text/html", headers=_NO_CACHE)

    app.add_api_route("/", index, methods=["GET", "HEAD"], include_in_schema=False)
    app.add_api_route("/jobs/{job_id}", index, methods=["GET", "HEAD"], include_in_schema=False)
    app.mount("/static", _RevalidatedStaticFiles(directory=STATIC_DIR), name="static")
