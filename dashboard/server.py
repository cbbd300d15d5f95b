"""Serve the dashboard app from inside the coordinator's asyncio loop.

The listening socket is made here (so port 0 reports the real port) with the TCP protocol named:
asyncio sets TCP_NODELAY only on accepted sockets whose proto is IPPROTO_TCP, and without it a
small response on a kept-alive connection waits about 40 ms (Nagle's algorithm meeting the
client's delayed ACK). Responses over GZIP_MIN_BYTES are gzipped for clients that accept it
(event streams excepted: Starlette's middleware passes text/event-stream through), at GZIP_LEVEL:
the coordinator's loop compresses every answer, and Starlette's default (9) took 69 ms for the
fleet's first answer at 5,000 workers (506 KB -> 29 KB) where level 1 takes 3 ms (-> 38 KB).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

import uvicorn
from starlette.middleware.gzip import GZipMiddleware
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from coordinator.edge.hop import on
from dashboard import tls_sniff

GZIP_MIN_BYTES = 1024
GZIP_LEVEL = 1


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):
        # The coordinator process owns SIGINT/SIGTERM (first drains, second forces exit).
        yield


class HttpServer:
    """`tls`: (certificate, key) PEM paths to serve HTTPS (plain HTTP on that port gets a 400);
    `client_ca`: the CA whose client certificates are verified (dashboard/tls_sniff.py); `loop`:
    another thread's loop to serve on (the gRPC edge's: dashboard/edge_http.py), default the
    calling one."""

    def __init__(self, app, address: str, tls: tuple[str, str] | None = None, client_ca: str | None = None,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        host, port = address.rsplit(":", 1)
        family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host.strip("[]"), int(port)))  # bound here so port 0 reports the real port
        self.url = f"{'https' if tls else 'http'}://{host}:{self._sock.getsockname()[1]}"
        # TLS is the sniffing protocol's (dashboard/tls_sniff.py), not uvicorn's ssl_* settings.
        http = tls_sniff.sniffing(AutoHTTPProtocol, tls_sniff.server_context(*tls, client_ca)) if tls else "auto"
        gzipped = GZipMiddleware(app, minimum_size=GZIP_MIN_BYTES, compresslevel=GZIP_LEVEL)
        self._server = _EmbeddedServer(uvicorn.Config(gzipped, http=http, log_level="warning", lifespan="off",
                                                      timeout_graceful_shutdown=2))
        self._task: asyncio.Future | None = None

    async def start(self) -> None:
        serve = self._server.serve(sockets=[self._sock])
        self._task = on(self._loop, serve) if self._loop else asyncio.create_task(serve)
        while not self._server.started:  # (set on the serving loop: a benign cross-thread read)
            if self._task.done():
                self._task.result()  # raises the startup error
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task:
            await self._task
        self._sock.close()
