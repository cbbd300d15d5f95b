"""A coordinator on PostgreSQL (`--db postgresql://...`) runs as a standby until it holds the
leader lease (coordinator/store/lease.py), then starts as a restarted coordinator does: it loads
the unfinished jobs, accepts the workers as they reconnect and re-attaches their running jobs.

    stand_by ---lease acquired---> RunningCoordinator (fenced store) ---lease lost---> exit 3

While standing by, it serves only refusals (coordinator/edge/standby.py, dashboard/standby.py):
gRPC health NOT_SERVING, every call UNAVAILABLE "standby, leader is ADDRESS", /readyz 503.
Deposed, it logs why and exits at once (DEPOSED_EXIT) without another write: whatever it was
doing, its token no longer passes the store's fence; its supervisor (Kubernetes) starts it
again, and it comes back as a standby.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from coordinator.edge.lease_metrics import LeaseCollector
from coordinator.edge.standby import start_standby_server
from coordinator.store.factory import require_psycopg
from coordinator.store.lease import DEPOSED, LEADING, Lease
from ringleader.errors import InvalidSpec

log = logging.getLogger("ringleader.coordinator")

DEPOSED_EXIT = 3  # exit status of a coordinator that lost the lease


def advertised(config) -> str:
    """The address standbys name as the leader's: --advertise-address, else HOST:PORT of
    --grpc-address with a wildcard host replaced by this machine's name."""
    if config.advertise_address:
        return config.advertise_address
    host, port = config.grpc_address.rsplit(":", 1)
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = socket.getfqdn()
    return f"{host}:{port}"


def exit_deposed(lease: Lease) -> None:
    """Called from the lease's thread: the event loop may be stuck on the lost database."""
    log.critical("deposed (lease token %d): %s; exiting without writing (status %d)",
                 lease.token, lease.why, DEPOSED_EXIT)
    for handler in logging.getLogger().handlers + log.handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(DEPOSED_EXIT)


async def stand_by(config) -> Lease:
    """Serve as a standby until this process leads; return its lease (LEADING)."""
    require_psycopg(config.db)
    if config.lease_ttl < 1.0:  # renewals every third of it, over a network: shorter flaps
        raise InvalidSpec("--lease-ttl", f"{config.lease_ttl} s is too short a lease: at least 1 s")
    loop = asyncio.get_running_loop()
    leading = asyncio.Event()

    def on_change(lease: Lease) -> None:
        if lease.state == LEADING:
            loop.call_soon_threadsafe(leading.set)
        elif lease.state == DEPOSED:
            exit_deposed(lease)

    lease = Lease(config.db, advertised(config), ttl_s=config.lease_ttl, on_change=on_change)
    registry = CollectorRegistry()
    registry.register(LeaseCollector(lease))
    sec = config.security
    server, port = await start_standby_server(config.grpc_address, lambda: lease.leader,
                                              credentials=sec.grpc_credentials())
    http = None
    try:
        if config.http_address:
            from dashboard.server import HttpServer
            from dashboard.standby import create_standby_app

            app = create_standby_app(lambda: lease.leader, lambda: (generate_latest(registry), CONTENT_TYPE_LATEST))
            http = HttpServer(app, config.http_address, tls=(sec.tls.cert, sec.tls.key) if sec.tls.cert else None)
            await http.start()
            import dashboard.app  # noqa: F401 - the leader's app, imported now: a takeover need not wait for it
        print(f"ringleader coordinator: standby on gRPC port {port} as {lease.holder}, waiting for the leader lease",
              flush=True)
        lease.start()
        await leading.wait()
    finally:
        if http:
            await http.stop()
        await server.stop(0)
    return lease
