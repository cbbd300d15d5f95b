"""Serve the dashboard app from inside the coordinator's asyncio loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import uvicorn


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):
        # The coordinator process owns SIGINT/SIGTERM (first drains, second forces exit).
        yield


class HttpServer:
    """`tls`: (certificate, key) PEM paths to serve HTTPS."""

    def __init__(self, app, address: str, tls: tuple[str, str] | None = None) -> None:
        host, port = address.rsplit(":", 1)
        self._sock = socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host.strip("[]"), int(port)))  # bound here so port 0 reports the real port
        self.url = f"{'https' if tls else 'http'}://{host}:{self._sock.getsockname()[1]}"
        cert, key = tls or (None, None)
        self._server = _EmbeddedServer(uvicorn.Config(app, log_level="warning", lifespan="off",
                                                      timeout_graceful_shutdown=2,
                                                      ssl_certfile=cert, ssl_keyfile=key))
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises the startup error
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task:
            await self._task
        self._sock.close()
