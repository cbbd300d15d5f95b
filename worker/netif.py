"""Addresses and interfaces (Linux): the address a worker advertises, and the interface holding
it, so that gloo and NCCL leave on the interface peers reach."""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct

_SIOCGIFADDR = 0x8915


def interface_of(address: str) -> str | None:
    """The name of the local interface whose IPv4 address is `address`, or None."""
    try:
        wanted = ipaddress.IPv4Address(address)
    except ValueError:
        return None
    if wanted.is_loopback:
        return "lo"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address on it
                continue
            if ipaddress.IPv4Address(raw[20:24]) == wanted:
                return name
    return None


def pin_interfaces(address: str, environ) -> None:
    """Set GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME to the interface holding `address`, unless
    the operator set them: peers reach this host on the address it advertised, so its
    collectives should leave on that interface too."""
    name = interface_of(address)
    if name:
        for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            environ.setdefault(var, name)


def route_to(target: str) -> str:
    """The local address this host uses to reach `target` (host:port): what peers can reach."""
    host = target.rsplit(":", 1)[0].strip("[]")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))  # UDP connect sends nothing; it only picks the route
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"
