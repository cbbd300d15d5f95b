"""Wiring of the coordinator process: gRPC server (jobs, workers, health, reflection)."""

from __future__ import annotations

import asyncio
import types
from typing import Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from coordinator.edge.edge_reads import READS, EdgeReads, then_flush
from coordinator.edge.hop import EdgeLoop, HoppedServicer, service_methods
from coordinator.edge.read_feed import Freshen, ReadFeed
from coordinator.edge.read_view import ReadView
from coordinator.edge.identity import WorkerIdentities
from coordinator.edge.auto_relay import AutoRelay
from coordinator.edge.relay_host import RelayHost
from coordinator.edge.rpc_parse import MalformedRequestInterceptor
from coordinator.shell.facade import Coordinator
from coordinator.edge.servicers import JobServicer
from coordinator.edge.watch import EdgeWatch
from coordinator.edge.worker_stream import WorkerServicer
from ringleader.grpc_options import SERVER_OPTIONS
from ringleader.v1 import jobs_pb2, jobs_pb2_grpc, workers_pb2, workers_pb2_grpc

JOBS = jobs_pb2.DESCRIPTOR.services_by_name["JobService"]
WORKERS = workers_pb2.DESCRIPTOR.services_by_name["WorkerService"]
SERVICE_NAMES = (JOBS.full_name, WORKERS.full_name)


async def start_server(coordinator: Coordinator, address: str,
                       interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
                       credentials: grpc.ServerCredentials | None = None,
                       forget_workers: Sequence[str] = (),
                       identities: WorkerIdentities | None = None,
                       relay_address: str = "", relay_settings: str = "",
                       relay_at: int = 0, relay_share: int = 0,
                       relay_cpus: Sequence[int] = ()) -> tuple["EdgeServer", int]:
    """Build and start the gRPC server on `address` (port 0 picks one); returns it with its port.
    The server runs on an edge loop of its own thread, each handler's body on the calling (core)
    loop: coordinator/edge/hop.py says why. `interceptors` wrap every RPC, the first outermost
    (metrics, then coordinator.edge.auth's token check), and request bytes that do not parse are
    answered innermost; `credentials` (ringleader.security.ServerSecurity.grpc_credentials) make
    it TLS; `forget_workers`: ids whose credentials are reset first (ServerSecurity.forget_workers,
    coordinator/edge/identity.py); `identities`: the workers' credentials, shared with the REST
    API's approvals (default: new); `relay_address`: the workers' streams are also served there, by
    a relay process (coordinator/edge/relay.py; `relay_settings` its share of the security), the
    server's `relay`; without one, `relay_at`: past that many direct streams, new ones move to a
    relay the server starts itself (coordinator/edge/auto_relay.py; 0: never), another one past each
    `relay_share` streams per relay; `relay_cpus`: the CPUs relays run on (default: this process's)."""
    identities = identities or WorkerIdentities(coordinator.store)
    for worker_id in forget_workers:
        identities.forget(worker_id)
    core, edge = asyncio.get_running_loop(), EdgeLoop()
    edge.watch_stalls(coordinator.timings.stall_warn_s)
    jobs, view, feed = job_service(coordinator, identities, core, edge.loop)
    workers = WorkerServicer(coordinator, identities, core, edge.loop)  # its streams' own edge/core split
    relay = RelayHost(workers, relay_address, relay_settings, relay_cpus) if relay_address else None
    if relay is None and relay_at > 0:
        workers.auto = AutoRelay(workers, address, relay_settings, relay_at, relay_share, relay_cpus)

    async def build() -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=[*interceptors, MalformedRequestInterceptor()])
        jobs_pb2_grpc.add_JobServiceServicer_to_server(jobs, server)
        workers_pb2_grpc.add_WorkerServiceServicer_to_server(workers, server)
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        port = await listen(server, health_servicer, address, credentials, health_pb2.HealthCheckResponse.SERVING)
        try:
            if relay:
                await relay.start()
        except BaseException:
            await relay.stop()
            await server.stop(0)
            raise
        return server, port
    feed.start()
    try:
        return await EdgeServer.start(edge, build(), relay, view, feed, workers.auto)
    except BaseException:
        await feed.stop()
        raise


def job_service(coordinator: Coordinator, identities: WorkerIdentities, core: asyncio.AbstractEventLoop,
                edge: asyncio.AbstractEventLoop) -> tuple[object, ReadView, ReadFeed]:
    """The JobService as the edge serves it: the reads from the edge's read view
    (coordinator/edge/read_view.py), WatchJob on the edge with events pushed from the core, every
    other call hopped to the core and handing the view its changes before it answers."""
    view = ReadView(coordinator.store)
    feed = ReadFeed(coordinator, view, edge)
    view.fresh = Freshen(feed, core)
    servicer = JobServicer(coordinator, identities)
    streams = ("WatchJob", "SubmitAndWatchJob")  # on the edge, events pushed from the core (watch.py)
    hopped = [m for m in service_methods(JOBS) if m not in (*streams, *READS)]
    flushing = types.SimpleNamespace(**{m: then_flush(getattr(servicer, m), feed) for m in hopped})
    jobs = HoppedServicer(flushing, hopped, core, edge)
    reads = EdgeReads(view)
    for name in READS:
        setattr(jobs, name, getattr(reads, name))
    watch = EdgeWatch(coordinator, core, flush=lambda: feed.flush(workers=False))
    jobs.WatchJob, jobs.SubmitAndWatchJob = watch.WatchJob, watch.SubmitAndWatchJob
    return jobs, view, feed


class EdgeServer:
    """A grpc.aio.Server on its edge loop, stopped from the core loop; `view`: the edge's read
    view, which `feed` keeps current (the REST reads are answered from it too)."""

    def __init__(self, server: grpc.aio.Server, edge: EdgeLoop, relay: RelayHost | None = None,
                 view: ReadView | None = None, feed: ReadFeed | None = None,
                 auto: AutoRelay | None = None) -> None:
        self._server, self._edge, self.relay, self.auto = server, edge, relay, auto
        self.view, self.feed = view, feed

    @property
    def edge(self) -> EdgeLoop:
        return self._edge

    @classmethod
    async def start(cls, edge: EdgeLoop, build, relay: RelayHost | None = None, view: ReadView | None = None,
                    feed: ReadFeed | None = None, auto: AutoRelay | None = None) -> tuple["EdgeServer", int]:
        try:
            server, port = await edge.run(build)
        except BaseException:
            edge.close()
            raise
        return cls(server, edge, relay, view, feed, auto), port

    async def stop(self, grace: float | None) -> None:
        if self.feed:
            await self.feed.stop()
        try:
            if self.relay:
                await self._edge.run(self.relay.stop())
            if self.auto:
                await self._edge.run(self.auto.stop())
            await self._edge.run(self._server.stop(grace))
        finally:
            self._edge.close()


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
