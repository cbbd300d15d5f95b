"""The web UI: one static page (plain JS, uPlot vendored under static/vendor) on top of /api/v1.

`/` (fleet and jobs) and `/jobs/{id}` (a job's charts and results table) both serve index.html;
the page routes on location.pathname. Everything it needs is served from here, so it works
without internet access.

The files are served from memory, read again when one changes on disk (its mtime), each with its
gzip (level 9, made once) and a hash of its content. The page names its scripts and styles with
that hash (`/static/app.js?v=HASH`), and an answer to a name with the current hash may be kept
for a year (a changed file gets a new name); anything else (the page itself, scripts app.js
loads when needed) is revalidated on each use by ETag, so a page never runs with a stale file.
They are answered on the loop, without a thread: Starlette's StaticFiles stat, open and read
each went through one, and on a coordinator busy with 5,000 workers' streams each such hand-off
waited for the GIL, four files to a first load.

The overview's page may name API answers to preload (mount's `preload`): the browser asks for them
while it fetches and runs the scripts, whose fetch() of the same URL then gets the preloaded
response (matched by URL, mode and credentials mode: one request, checked by a browser test). The
fleet's first answer is the overview's longest wait at 5,000 workers; preloaded, it is no longer
asked for only once the scripts have run.
"""

from __future__ import annotations

import gzip
import hashlib
import html
import mimetypes
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import Response

from dashboard.server import GZIP_MIN_BYTES

STATIC_DIR = Path(__file__).parent / "static"
INDEX = "index.html"
KEEP = "public, max-age=31536000, immutable"  # a hashed name's content never changes
REVALIDATE = "no-cache"
REF = re.compile(r'(?<=")/static/([^"?#]+)(?=")')  # the page's names of its files
# crossorigin: the mode and credentials of a fetch() (cors, same-origin); without it Chromium asks twice
PRELOAD = '<link rel="preload" href="{}" as="fetch" crossorigin>'


@dataclass(frozen=True)
class Asset:
    body: bytes
    gzipped: bytes | None  # None: too small to gain from it
    version: str  # a hash of body
    media_type: str
    mtime_ns: int = 0


def asset(body: bytes, media_type: str, mtime_ns: int = 0) -> Asset:
    gzipped = gzip.compress(body, 9, mtime=0) if len(body) >= GZIP_MIN_BYTES else None
    return Asset(body, gzipped, hashlib.sha256(body).hexdigest()[:16], media_type, mtime_ns)


class Assets:
    """The files under `root`, each read when first asked for and again once its mtime changes."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._files: dict[str, Asset] = {}
        self._pages: dict[tuple[str, ...], tuple[tuple[str, ...], Asset]] = {}  # by its preloads

    def get(self, name: str) -> Asset | None:
        try:
            path = (self.root / name).resolve()
            st = path.stat()
        except (OSError, ValueError):  # ValueError: a NUL in the name
            return None
        if not path.is_relative_to(self.root) or not stat.S_ISREG(st.st_mode):
            return None
        key = path.relative_to(self.root).as_posix()  # one entry per file, however it is named
        known = self._files.get(key)
        if known is None or known.mtime_ns != st.st_mtime_ns:
            media_type = mimetypes.guess_type(key)[0] or "application/octet-stream"
            known = self._files[key] = asset(path.read_bytes(), media_type, st.st_mtime_ns)
        return known

    def page(self, preload: tuple[str, ...] = ()) -> Asset:
        """index.html with each file it names carrying its hash (`?v=`), and a preload link at the
        end of its head for each URL of `preload`."""
        raw = self.get(INDEX)
        if raw is None:
            raise HTTPException(404)
        text = raw.body.decode()
        files = {name: self.get(name) for name in REF.findall(text)}
        key = (raw.version, *(f"{n}={a.version if a else ''}" for n, a in files.items()))
        known = self._pages.get(preload)
        if known is None or known[0] != key:
            named = REF.sub(lambda m: f"/static/{m[1]}?v={files[m[1]].version}" if files[m[1]] else m[0], text)
            # At the end of the head, after the (deferred) scripts: the browser asks for those first,
            # so the coordinator's loop serves them (from memory) before the fleet's answer holds it.
            links = "".join(PRELOAD.format(html.escape(url)) for url in preload)
            known = self._pages[preload] = (key, asset(named.replace("</head>", links + "</head>", 1).encode(), "text/html"))
        return known[1]


def respond(request: Request, file: Asset, cache: str) -> Response:
    """`file`, gzipped where the client takes it; 304 where it holds this version already."""
    zipped = file.gzipped is not None and "gzip" in request.headers.get("accept-encoding", "")
    etag = f'"{file.version}{".gz" if zipped else ""}"'
    headers = {"Cache-Control": cache, "ETag": etag, "Vary": "Accept-Encoding"}
    held = {t.strip().removeprefix("W/") for t in request.headers.get("if-none-match", "").split(",")}
    if held & {f'"{file.version}"', f'"{file.version}.gz"', "*"}:
        return Response(status_code=304, headers=headers)
    if zipped:
        return Response(file.gzipped, media_type=file.media_type, headers={**headers, "Content-Encoding": "gzip"})
    return Response(file.body, media_type=file.media_type, headers=headers)


def mount(app: FastAPI, root: Path = STATIC_DIR, preload: tuple[str, ...] = ()) -> None:
    """Serve the page (at / and /jobs/{id}) and its files (from `root`); the overview's (/)
    preloads the API answers `preload` names (only where the API needs no token: the browser
    sends a preload without the page's Authorization header)."""
    files = Assets(root)

    async def overview(request: Request) -> Response:
        return respond(request, files.page(preload), REVALIDATE)

    async def page(request: Request) -> Response:
        return respond(request, files.page(), REVALIDATE)

    async def static(request: Request, path: str) -> Response:
        file = files.get(path)
        if file is None:
            raise HTTPException(404)
        return respond(request, file, KEEP if request.query_params.get("v") == file.version else REVALIDATE)

    app.add_api_route("/", overview, methods=["GET", "HEAD"], include_in_schema=False)
    app.add_api_route("/jobs/{job_id}", page, methods=["GET", "HEAD"], include_in_schema=False)
    app.add_api_route("/static/{path:path}", static, methods=["GET", "HEAD"], include_in_schema=False)
