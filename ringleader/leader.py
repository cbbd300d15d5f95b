"""Several coordinators, one leading (coordinators sharing a PostgreSQL store): a worker and the
CLI take a comma list of their addresses in --coordinator and talk to whichever leads. A standby
refuses every call with UNAVAILABLE "standby, leader is ADDRESS" (coordinator/edge/standby.py)
and its gRPC health says NOT_SERVING.
"""

from __future__ import annotations

from typing import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

STANDBY_PREFIX = "standby, leader is "


def addresses(target: str) -> list[str]:
    """The addresses of a --coordinator value ("a:1,b:1"); one address stays one."""
    found = [a.strip() for a in target.split(",") if a.strip()]
    return found or [target]


def named_leader(details: str) -> str:
    """The leader a standby's refusal names ("" if `details` is not a standby's refusal)."""
    return details[len(STANDBY_PREFIX):].strip() if details.startswith(STANDBY_PREFIX) else ""


class Rotation:
    """Which of several addresses to try: the current one until it fails, then the leader the
    refusal named if it is one of ours, else the next in the list."""

    def __init__(self, target: str) -> None:
        self.addresses = addresses(target)
        self._i = 0

    @property
    def current(self) -> str:
        return self.addresses[self._i]

    def failed(self, details: str = "") -> str:
        leader = named_leader(details)
        if leader in self.addresses and leader != self.current:
            self._i = self.addresses.index(leader)
        else:
            self._i = (self._i + 1) % len(self.addresses)
        return self.current


def pick_leader(target: str, channel: Callable[[str], grpc.Channel], timeout_s: float = 2.0) -> str:
    """The first address of `target` whose gRPC health says SERVING (the leader); with one
    address, or none serving, the first (its calls then fail with its own error)."""
    found = addresses(target)
    if len(found) == 1:
        return found[0]
    for address in found:
        with channel(address) as ch:
            try:
                reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
            except grpc.RpcError:
                continue
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return address
    return found[0]
