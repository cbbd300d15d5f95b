"""What a standby coordinator serves (coordinator/store/lease.py: it waits for the leader lease):
nothing that reads or changes state. Its gRPC health service says NOT_SERVING (so a Kubernetes
probe and a Service route around it) and every JobService / WorkerService call is refused with
UNAVAILABLE "standby, leader is ADDRESS", which workers and the CLI follow (ringleader/leader.py).
"""

from __future__ import annotations

from typing import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from coordinator.edge.auth import take_first
from coordinator.edge.hop import EdgeLoop
from coordinator.edge.server import SERVICE_NAMES, EdgeServer, listen
from ringleader.grpc_options import SERVER_OPTIONS
from ringleader.leader import STANDBY_PREFIX


def standby_message(leader: str) -> str:
    return STANDBY_PREFIX + (leader or "not elected yet")


class _Refuse(grpc.GenericRpcHandler):
    def __init__(self, leader: Callable[[], str]) -> None:
        self._leader = leader

    def service(self, details: grpc.HandlerCallDetails):
        if details.method.rsplit("/", 1)[0].lstrip("/") not in SERVICE_NAMES:
            return None  # UNIMPLEMENTED, as from any server

        # One handler kind serves every method (a unary call's request is its first message).
        async def refuse(requests, context: grpc.aio.ServicerContext) -> None:
            await take_first(context)  # a worker's Register, written as the call opens
            await context.abort(grpc.StatusCode.UNAVAILABLE, standby_message(self._leader()))

        return grpc.stream_stream_rpc_method_handler(refuse)


async def start_standby_server(address: str, leader: Callable[[], str],
                               credentials: grpc.ServerCredentials | None = None) -> tuple[EdgeServer, int]:
    """The standby's gRPC server on `address` (on an edge loop, as the leader's: coordinator/edge/
    hop.py); `leader()` names the current leader's address."""
    async def build() -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server(options=SERVER_OPTIONS, handlers=[_Refuse(leader)])
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        return server, await listen(server, health_servicer, address, credentials,
                                    health_pb2.HealthCheckResponse.NOT_SERVING)
    return await EdgeServer.start(EdgeLoop(), build())
