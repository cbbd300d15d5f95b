"""The shape every middleware of the HTTP side shares: pure ASGI, HTTP requests only.

Pure ASGI (not Starlette's BaseHTTPMiddleware) so that streamed responses (Server-Sent Events)
pass through unbuffered; lifespan and websocket scopes go straight to the app.
"""

from __future__ import annotations

import abc

from starlette.types import ASGIApp, Receive, Scope, Send


class HttpMiddleware(abc.ABC):
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.http(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    @abc.abstractmethod
    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """This middleware's handling of one HTTP request (it calls self.app to pass it on)."""
