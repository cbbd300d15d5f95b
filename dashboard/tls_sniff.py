"""HTTPS and a clear answer to plain HTTP on the same port.

With TLS in asyncio's server, a browser or `curl http://` that speaks plain HTTP to the HTTPS
port gets an empty reply: the handshake fails and the connection is dropped. Here each accepted
connection's first bytes decide: a TLS record (0x16, a ClientHello) goes through asyncio's own
TLS layer to uvicorn's HTTP protocol; anything else gets a one-line 400 naming the https:// URL,
as nginx does ("The plain HTTP request was sent to HTTPS port").

With a client CA (--tls-client-ca) a client certificate is asked for and, when presented, verified
against it (a foreign one fails the handshake). It is optional at the handshake so that /healthz
and /readyz stay reachable to probes; dashboard/guard.py refuses every other route without one, as
the gRPC port does at its handshake. The verified certificate (DER) reaches each request's scope
as scope["state"][PEER_CERT], the one place an ASGI app can see the connection's TLS peer.
"""

from __future__ import annotations

import asyncio
import ssl
from asyncio.sslproto import SSLProtocol

TLS_HANDSHAKE = 0x16  # the content type of the first TLS record
PEER_CERT = "ringleader.peer_cert"  # scope["state"] key: the client certificate (DER), if any


def server_context(cert: str, key: str, client_ca: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    if client_ca:
        context.load_verify_locations(cafile=client_ca)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def with_peer_cert(http_protocol: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """`http_protocol` (uvicorn's) whose requests carry the connection's client certificate: its
    scope["state"] is a copy of the protocol's app_state, made per request."""

    class PeerCertProtocol(http_protocol):  # type: ignore[misc, valid-type]
        def connection_made(self, transport) -> None:
            ssl_object = transport.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            self.app_state = {**self.app_state, PEER_CERT: der}
            super().connection_made(transport)

    return PeerCertProtocol


def plain_http_answer(host: bytes) -> bytes:
    where = f"https://{host.decode('latin-1')}/" if host else "https://"
    body = (f"This port speaks HTTPS: use {where}\n").encode()
    return (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def _host_header(data: bytes) -> bytes:
    for line in data.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"host":
            return value.strip()[:255]
    return b""


def sniffing(http_protocol: type[asyncio.Protocol], context: ssl.SSLContext) -> type[asyncio.Protocol]:
    """A protocol class for uvicorn.Config(http=...) that serves `http_protocol` over TLS and
    answers plain HTTP with a 400."""

    tls_protocol = with_peer_cert(http_protocol)

    class Sniffer(asyncio.Protocol):
        def __init__(self, **kwargs) -> None:
            self._make = lambda: tls_protocol(**kwargs)  # uvicorn's arguments (config, server_state, ...)
            self._transport: asyncio.Transport | None = None

        def connection_made(self, transport) -> None:
            self._transport = transport

        def data_received(self, data: bytes) -> None:
            transport = self._transport
            assert transport is not None
            if data[0] != TLS_HANDSHAKE:
                transport.write(plain_http_answer(_host_header(data)))
                transport.close()
                return
            tls = SSLProtocol(asyncio.get_running_loop(), self._make(), context, None, server_side=True)
            transport.set_protocol(tls)
            tls.connection_made(transport)
            buffer = tls.get_buffer(len(data))
            buffer[:len(data)] = data  # the ClientHello already read: the TLS layer's first input
            tls.buffer_updated(len(data))

        def connection_lost(self, exc) -> None:
            self._transport = None

    return Sniffer
