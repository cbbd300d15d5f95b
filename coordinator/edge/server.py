"""Wiring of the coordinator process: gRPC server (jobs, workers, health, reflection)."""

from __future__ import annotations

from typing import Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from coordinator.edge.identity import WorkerIdentities
from coordinator.edge.rpc_parse import MalformedRequestInterceptor
from coordinator.core.facade import Coordinator
from coordinator.edge.servicers import JobServicer, WorkerServicer
from ringleader.grpc_options import SERVER_OPTIONS
from ringleader.v1 import jobs_pb2, jobs_pb2_grpc, workers_pb2, workers_pb2_grpc

SERVICE_NAMES = (
    jobs_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
    workers_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name,
)


async def start_server(coordinator: Coordinator, address: str,
                       interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
                       credentials: grpc.ServerCredentials | None = None,
                       forget_workers: Sequence[str] = (),
                       identities: WorkerIdentities | None = None) -> tuple[grpc.aio.Server, int]:
    """Build and start the gRPC server on `address` (port 0 picks one); returns it with its port.
    `interceptors` wrap every RPC, the first outermost (metrics, then coordinator.edge.auth's token
    check), and request bytes that do not parse are answered innermost; `credentials`
    (ringleader.security.ServerSecurity.grpc_credentials) make it TLS; `forget_workers`: ids
    whose credentials are reset first (ServerSecurity.forget_workers, coordinator/edge/identity.py);
    `identities`: the workers' credentials, shared with the REST API's approvals (default: new)."""
    server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=[*interceptors, MalformedRequestInterceptor()])
    identities = identities or WorkerIdentities(coordinator.store)
    for worker_id in forget_workers:
        identities.forget(worker_id)
    jobs_pb2_grpc.add_JobServiceServicer_to_server(JobServicer(coordinator, identities), server)
    workers_pb2_grpc.add_WorkerServiceServicer_to_server(WorkerServicer(coordinator, identities), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    return server, await listen(server, health_servicer, address, credentials, health_pb2.HealthCheckResponse.SERVING)


async def listen(server: grpc.aio.Server, health_servicer, address: str,
                 credentials: grpc.ServerCredentials | None, status: int) -> int:
    """Bind `address` (TLS with `credentials`), start, and give every service the health
    `status` (SERVING here, NOT_SERVING on a standby); returns the port bound."""
    port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    await server.start()
    for name in (*SERVICE_NAMES, ""):
        await health_servicer.set(name, status)
    return port
