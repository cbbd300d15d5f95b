"""Who may call what: the users' and the workers' bearer tokens, checked on every gRPC call.

    JobService (submit, cancel, read)      the users' token
    WorkerService (register, assignments)  the workers' token
    health checking, server reflection     open
    anything else                          the users' token (closed by default)

A role whose token is not set is open (a coordinator on loopback for one developer). A set token
is required from every caller, loopback included. A valid token of the other role is
PERMISSION_DENIED; no token or a wrong one UNAUTHENTICATED. Tokens are compared in constant time
and never logged. The REST side (dashboard/guard.py) asks the same `Access`.
"""

from __future__ import annotations

import asyncio

import hmac

import grpc

from ringleader.errors import PermissionDenied, RingleaderError, Unauthenticated, answer
from ringleader.security import AUTHORIZATION, USERS_TOKEN_ENV, WORKERS_TOKEN_ENV, bearer_token

USERS, WORKERS = "users", "workers"
# Each role: its token's name, where a caller sets it, and what it allows.
_ROLES = {
    USERS: ("the users' token", f"{USERS_TOKEN_ENV} or --token-file", "submit, cancel or read jobs"),
    WORKERS: ("the workers' token", f"{WORKERS_TOKEN_ENV} or --token-file", "register a worker"),
}
OPEN_SERVICES = frozenset({
    "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection",
    "grpc.reflection.v1.ServerReflection",
})
SERVICE_ROLES = {"ringleader.v1.JobService": USERS, "ringleader.v1.WorkerService": WORKERS}


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


class Access:
    """The two tokens, and the one check every entry point makes."""

    def __init__(self, users_token: str = "", workers_token: str = "") -> None:
        self._tokens = {USERS: users_token, WORKERS: workers_token}

    def needs_token(self, role: str) -> bool:
        return bool(self._tokens[role])

    def require(self, role: str, authorization: str | None) -> None:
        """Return if `authorization` (a header value) may act as `role`; else raise
        Unauthenticated (none, or wrong) or PermissionDenied (the other role's token)."""
        wanted = self._tokens[role]
        if not wanted:
            return
        token = bearer_token(authorization)
        name, where, action = _ROLES[role]
        needed = f"{name} ({where})"
        if not token:
            raise Unauthenticated(f"no bearer token: to {action}, send {needed}")
        if _same(token, wanted):
            return
        other = WORKERS if role == USERS else USERS
        if self._tokens[other] and _same(token, self._tokens[other]):
            raise PermissionDenied(f"this is {_ROLES[other][0]}: it cannot {action}")
        raise Unauthenticated(f"invalid token: to {action}, send {needed}")


def role_of(method: str) -> str | None:
    """The role a gRPC method ("/package.Service/Method") needs, or None for open services."""
    service = method.lstrip("/").rpartition("/")[0]
    if service in OPEN_SERVICES:
        return None
    return SERVICE_ROLES.get(service, USERS)


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Refuses a call before its handler runs unless its metadata carries the right token."""

    def __init__(self, access: Access) -> None:
        self.access = access

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        role = role_of(handler_call_details.method)
        if handler is None or role is None:
            return handler
        metadata = dict(handler_call_details.invocation_metadata or ())
        try:
            self.access.require(role, metadata.get(AUTHORIZATION))
        except RingleaderError as exc:
            return _refusal(handler, exc)
        return handler


def _refusal(handler: grpc.RpcMethodHandler, exc: RingleaderError) -> grpc.RpcMethodHandler:
    """A handler of the same shape as `handler` that only answers the refusal."""
    code, details = getattr(grpc.StatusCode, answer(exc).grpc_code), str(exc)

    async def refuse(request, context):
        await context.abort(code, details)

    async def refuse_stream(requests, context):
        await take_first(context)
        await context.abort(code, details)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse_stream)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse_stream)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)


async def take_first(context, timeout_s: float = 1.0) -> None:
    """Read a streaming call's first message (or wait up to `timeout_s` for it) before refusing
    the call: a client that writes it as the call opens (a worker's Register) otherwise has that
    write fail, with INTERNAL "Failed execute_batch" in place of the refusal it must read (seen 2
    times in 3 once the gRPC server ran on its own loop and refused at once)."""
    try:
        await asyncio.wait_for(context.read(), timeout_s)
    except Exception:  # noqa: BLE001 - nothing sent, or the caller gone: refuse all the same
        pass
