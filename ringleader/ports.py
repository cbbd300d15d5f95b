"""A listening address already taken, said in one line before a server binds it.

gRPC's own bind failure arrives as a RuntimeError after its C core has logged a line of its own,
and uvicorn's as a traceback; asking first (binding a throwaway socket) lets the coordinator
refuse with one line naming the flag. The server's own bind stays the guard (SO_REUSEPORT is
off: ringleader/grpc_options.py), so a port taken between the question and the bind still fails.
"""

from __future__ import annotations

import errno
import socket

from ringleader.errors import InvalidSpec


def in_use(address: str) -> bool:
    """Whether a TCP listener already holds HOST:PORT (port 0, unix: and names that do not
    resolve are left to the server, which reports them itself)."""
    if address.startswith("unix:") or ":" not in address:
        return False
    host, port = address.rsplit(":", 1)
    if not port.isdigit() or int(port) == 0:
        return False
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError):
        return False
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                s.bind(sockaddr)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return True
    return False


def taken(flag: str, address: str, what: str) -> InvalidSpec:
    """The one-line refusal for `address` (given by `flag`) already in use."""
    return InvalidSpec(flag, f"{address} is already in use (another {what} running?): "
                             f"stop that one, or give {flag} a free port (:0 picks one)")


def refuse_if_taken(flag: str, address: str, what: str = "coordinator") -> None:
    if in_use(address):
        raise taken(flag, address, what)
