"""HTTPS and a clear answer to plain HTTP on the same port.

With TLS in asyncio's server, a browser or `curl http://` that speaks plain HTTP to the HTTPS
port gets an empty reply: the handshake fails and the connection is dropped. Here each accepted
connection's first bytes decide: a TLS record (0x16, a ClientHello) goes through asyncio's own
TLS layer to uvicorn's HTTP protocol; anything else gets a one-line 400 naming the https:// URL,
as nginx does ("The plain HTTP request was sent to HTTPS port").
"""

from __future__ import annotations

import asyncio
import ssl
from asyncio.sslproto import SSLProtocol

TLS_HANDSHAKE = 0x16  # the content type of the first TLS record


def server_context(cert: str, key: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


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

    class Sniffer(asyncio.Protocol):
        def __init__(self, **kwargs) -> None:
            self._make = lambda: http_protocol(**kwargs)  # uvicorn's arguments (config, server_state, ...)
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
