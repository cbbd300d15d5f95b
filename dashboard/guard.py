"""The HTTP side's door: tokens, cross-origin refusals and a strict Content-Security-Policy.

A pure ASGI middleware in front of every route, so a refused request never reaches a handler
(and streams pass through unbuffered):

    /healthz, /readyz                  open
    /, /jobs/{id}, /static/*           open: the page holds no data; it asks for the token
    /openapi.json                      open: the API's shape is no secret
    /metrics                           open, or the users' token with --metrics-auth
    everything else (/api/v1, ...)     the users' token (coordinator.edge.auth.Access), and with
                                       client certificates (--tls-client-ca) one that is not a
                                       worker's: the rule gRPC applies (coordinator/edge/identity.py)

Refusals are JSON (`{"detail": ...}`): 401 with `WWW-Authenticate: Bearer` for no or a wrong
token, 403 for the workers' token. A request another site's page sends (a cross-origin `Origin`
or `Sec-Fetch-Site`) is refused with 403 unless it carries a valid token, which such a page
cannot have: there are no CORS allowances, so a browser never sends it one. Without a users'
token, only loopback names and IP addresses are served as Host (a DNS-rebinding page names its
own host). Every response carries the CSP: scripts, styles and connections from this origin
only, no inline code, no framing.
"""

from __future__ import annotations

import ipaddress
import json
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator.edge.auth import USERS, Access
from coordinator.edge.identity import cert_identity, cert_may_use_jobs
from dashboard.asgi import HttpMiddleware
from dashboard.tls_sniff import PEER_CERT
from ringleader.errors import RingleaderError, answer

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/", "/openapi.json"})
OPEN_PREFIXES = ("/static/", "/jobs/")
LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


@dataclass(frozen=True)
class GuardConfig:
    access: Access
    metrics_auth: bool = False
    any_host: bool = True  # False: only loopback names and IP literals as Host
    client_certs: bool = False  # TLS with a client CA: a closed route needs a client certificate


def is_open(path: str, metrics_auth: bool) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES) or (path == "/metrics" and not metrics_auth)


def cross_origin(headers: Headers) -> bool:
    """Whether a browser says another site's page sent this request."""
    if headers.get("sec-fetch-site", "") in ("cross-site", "same-site"):
        return True
    origin = headers.get("origin")
    if origin is None:
        return False  # not sent by a browser page, or a same-origin GET
    try:
        return urlsplit(origin).netloc.lower() != headers.get("host", "").lower()
    except ValueError:  # not even a URL: no page of ours sent it
        return True


def host_is_local(host: str) -> bool:
    """A Host header naming loopback or an IP address (which a rebinding page cannot use)."""
    try:
        name = urlsplit(f"//{host}").hostname or ""
    except ValueError:  # "[::1", say
        return False
    if name in LOOPBACK_NAMES:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


class Guard(HttpMiddleware):
    def __init__(self, app: ASGIApp, config: GuardConfig) -> None:
        super().__init__(app)
        self.config = config

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self.refusal(scope["path"], Headers(scope=scope), (scope.get("state") or {}).get(PEER_CERT))
        if refusal:
            await _send_refusal(send, *refusal)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def refusal(self, path: str, headers: Headers, peer_cert: bytes | None = None) -> tuple[int, str] | None:
        """(HTTP status, detail) for a request that must not reach a handler, else None.
        `peer_cert`: the connection's verified client certificate (DER), None without one."""
        if is_open(path, self.config.metrics_auth):
            return None
        if self.config.client_certs and not peer_cert:
            # The gRPC port refuses such a caller at its handshake (UNAVAILABLE).
            return 401, "no client certificate: this coordinator requires one (--tls-client-ca) on its API"
        access = self.config.access
        try:
            access.require(USERS, headers.get("authorization"))  # the token first, as the gRPC interceptor
            if peer_cert:
                cert_may_use_jobs(cert_identity(ssl.DER_cert_to_PEM_cert(peer_cert).encode()))
        except RingleaderError as exc:
            return answer(exc).http_status, str(exc)
        if not access.needs_token(USERS):  # an open coordinator: only its own pages may call it
            if cross_origin(headers):
                return 403, "cross-origin request refused: this API serves its own pages only"
            if not self.config.any_host and not host_is_local(headers.get("host", "")):
                return 403, ("Host refused: without a users' token only localhost and IP addresses "
                             "are served (DNS rebinding protection)")
        return None


async def _send_refusal(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
