"""One credential rule at every door: every credential a caller can hold, against every users'
route of both transports (each JobService RPC from its descriptor, each REST route from the
app's OpenAPI document, /metrics), with the same expected answer on both.

A real coordinator in this process: both tokens, TLS with client certificates required
(--tls-client-ca), gRPC and HTTPS on loopback, SQLite in a temp folder. The answers:

    reached   the call got past the door (any answer its handler gives to an empty request)
    unauth    no token or a wrong one          (gRPC UNAUTHENTICATED, HTTP 401)
    denied    a worker's credential as a user  (gRPC PERMISSION_DENIED, HTTP 403)
    no-cert   no client certificate            (gRPC: the handshake fails, UNAVAILABLE; HTTP 401)
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from pathlib import Path

import grpc
import httpx
import pytest
from google.protobuf import message_factory

from dashboard.guard import is_open
from ringleader_app.certs import worker_files, write_cluster_files
from ringleader_app.process import CoordinatorConfig, RunningCoordinator
from ringleader.security import ServerSecurity, TlsFiles, bearer
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration

# Credentials: (token, certificate) -> the answer on every users' route of either transport.
TOKENS = ("none", "wrong", "workers", "users")
CERTS = ("user", "worker", "none")


def expected(token: str, cert: str) -> str:
    if cert == "none":
        return "no-cert"
    if token in ("none", "wrong"):
        return "unauth"  # the token is checked first, on both transports
    if token == "workers" or cert == "worker":
        return "denied"
    return "reached"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pki")
    write_cluster_files(root, workers=["s0"])
    return root


def tokens(pki: Path) -> dict[str, str]:
    read = {n: (pki / f"{n}.token").read_text().strip() for n in ("users", "workers")}
    return {"none": "", "wrong": "w" * 40, **read}


def cert_files(pki: Path, cert: str) -> tuple[str, str] | None:
    if cert == "none":
        return None
    pem, key = ("client.pem", "client.key") if cert == "user" else worker_files("s0")
    return str(pki / pem), str(pki / key)


def grpc_answer(code: grpc.StatusCode, details: str) -> str:
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return "unauth"
    if code == grpc.StatusCode.PERMISSION_DENIED and ("worker" in details or "workers' token" in details):
        return "denied"
    if code == grpc.StatusCode.UNAVAILABLE:
        return "no-cert"
    return "reached"


def http_answer(status: int, detail: str) -> str:
    if status == 401:
        return "no-cert" if detail.startswith("no client certificate") else "unauth"
    if status == 403:
        return "denied"
    return "reached"


async def grpc_matrix(target: str, pki: Path) -> dict:
    service = pb.DESCRIPTOR.services_by_name["JobService"]
    got = {}
    for cert in CERTS:
        files = cert_files(pki, cert)
        ca = (pki / "ca.pem").read_bytes()
        creds = grpc.ssl_channel_credentials(ca, *(Path(f).read_bytes() for f in reversed(files))) if files \
            else grpc.ssl_channel_credentials(ca)
        async with grpc.aio.secure_channel(target, creds) as channel:
            for token in TOKENS:
                metadata = bearer(tokens(pki)[token]) if token != "none" else ()
                for method in service.methods:
                    request = message_factory.GetMessageClass(method.input_type)()
                    reply = message_factory.GetMessageClass(method.output_type)
                    kind = channel.unary_stream if method.server_streaming else channel.unary_unary
                    rpc = kind(f"/{service.full_name}/{method.name}", request_serializer=type(request).SerializeToString,
                               response_deserializer=reply.FromString)
                    try:
                        call = rpc(request, timeout=5, metadata=metadata)
                        if method.server_streaming:
                            async for _ in call:
                                break
                            call.cancel()
                        else:
                            await call
                        answer = "reached"
                    except grpc.aio.AioRpcError as exc:
                        answer = "reached" if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED \
                            else grpc_answer(exc.code(), exc.details() or "")
                    got[(token, cert, method.name)] = answer
    return got


def rest_routes(url: str, trust: ssl.SSLContext) -> list[tuple[str, str]]:
    """Every closed route's (method, path; /healthz and /readyz are open to probes) from the OpenAPI document, path parameters filled in."""
    doc = httpx.get(f"{url}/openapi.json", verify=trust, timeout=30).json()
    routes = [("GET", "/metrics")]
    for path, item in doc["paths"].items():
        for method in item:
            if method.upper() in ("GET", "POST", "PUT", "PATCH", "DELETE") and not is_open(path, metrics_auth=True):
                routes.append((method.upper(), re.sub(r"\{[^}]+\}", "x0", path)))
    assert len(routes) >= 20, routes
    return routes


def rest_matrix(url: str, pki: Path) -> dict:
    got = {}
    for cert in CERTS:
        trust = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        if (files := cert_files(pki, cert)):
            trust.load_cert_chain(*files)
        routes = rest_routes(url, trust)
        with httpx.Client(base_url=url, verify=trust, timeout=30) as http:
            for token in TOKENS:
                headers = {"authorization": f"Bearer {tokens(pki)[token]}"} if token != "none" else {}
                for method, path in routes:
                    # A stream: only its status is read (an event stream would not end).
                    with http.stream(method, path, headers=headers,
                                     json={} if method != "GET" else None) as r:
                        detail = json.loads(r.read())["detail"] if r.status_code in (401, 403) else ""
                        got[(token, cert, f"{method} {path}")] = http_answer(r.status_code, detail)
    return got


def test_every_credential_gets_the_same_answer_at_every_door(tmp_path, pki):
    sec = ServerSecurity(tokens(pki)["users"], tokens(pki)["workers"], metrics_auth=True,
                         tls=TlsFiles(str(pki / "ca.pem"), str(pki / "server.pem"), str(pki / "server.key"),
                                      ca_flag="--tls-client-ca"))

    async def scenario():
        async with RunningCoordinator(CoordinatorConfig(grpc_address="127.0.0.1:0", http_address="127.0.0.1:0",
                                                        db=str(tmp_path / "jobs.db"), security=sec)) as coord:
            on_grpc = await grpc_matrix(coord.grpc_target, pki)
            on_rest = await asyncio.to_thread(rest_matrix, coord.http_url, pki)
            return on_grpc, on_rest

    on_grpc, on_rest = asyncio.run(scenario())
    for name, got in (("gRPC", on_grpc), ("REST", on_rest)):
        wrong = {k: v for k, v in got.items() if v != expected(k[0], k[1])}
        assert not wrong, (name, len(wrong), sorted(wrong.items())[:20])
    # Both transports were asked every credential, on more than a handful of routes each.
    for got in (on_grpc, on_rest):
        assert {(t, c) for t, c, _ in got} == {(t, c) for t in TOKENS for c in CERTS}
        assert len({r for _, _, r in got}) >= 13
