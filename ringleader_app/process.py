"""The coordinator process wiring: store, domain, metrics, the gRPC server and the HTTP side
(dashboard/). Lifecycle startup -> serve -> shutdown; a first SIGTERM/SIGINT drains, a second
forces exit. It lives with the entry points so that coordinator/ never imports dashboard/."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path


from coordinator.edge.auth import Access, AuthInterceptor
from coordinator.edge.identity import WorkerIdentities
from coordinator.edge.k8s_identity import TokenReviewer
from coordinator.health.hooks import HookSender
from coordinator.health.k8s_taint import NodeTainter
from coordinator.edge.metrics import CoordinatorMetrics
from coordinator.edge.relay import settings_env
from coordinator.edge.relay_metrics import RelayCollector
from coordinator.edge.server import EdgeServer, start_server
from coordinator.shell.facade import Coordinator
from coordinator.shell.gcpace import tune_collector
from coordinator.store.factory import is_postgres, open_store, redacted
from coordinator.store.lease import Lease
from coordinator.edge.lease_metrics import LeaseCollector
from coordinator.health.sweeper import Sweeper
from ringleader_app.config import CoordinatorConfig, core_timings
from ringleader.errors import InvalidSpec
from ringleader.ports import refuse_if_taken
from ringleader.security import is_loopback, with_port
from ringleader.signals import on_stop_signals

log = logging.getLogger("ringleader.coordinator")


def default_db_path() -> str:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(state) / "ringleader" / "jobs.db")


def exposed(config: CoordinatorConfig) -> list[tuple[str, str]]:
    """(flag, address) of each port this coordinator would open off loopback."""
    ports = [("--grpc-address", config.grpc_address), ("--http-address", config.http_address),
             ("--worker-address", config.worker_address)]
    return [(flag, address) for flag, address in ports if address and not is_loopback(address)]


def check_exposure(config: CoordinatorConfig) -> str:
    """Refuse (InvalidSpec, exit code 2) to serve off loopback without both tokens unless
    --insecure; return the warning an --insecure coordinator repeats ("" when none is due)."""
    ports = exposed(config)
    missing = config.security.missing_tokens()
    if not ports or not missing:
        return ""
    flag, address = ports[0]
    what = " and ".join(missing)
    if not config.security.insecure:
        raise InvalidSpec(flag, f"{address} is reachable from other hosts, but {what} is not set: "
                                "set both tokens, or pass --insecure to serve it open")
    return (f"--insecure: {', '.join(a for _, a in ports)} reachable from other hosts without {what}: "
            "anyone who reaches it can submit and cancel jobs, read results or join as a worker")


def check_ports(config: CoordinatorConfig) -> None:
    """Refuse (one line, exit code 2) a gRPC or HTTP address another process already listens on."""
    refuse_if_taken("--grpc-address", config.grpc_address)
    if config.http_address:
        refuse_if_taken("--http-address", config.http_address)


def check_worker_address(config: CoordinatorConfig) -> None:
    """The relay's port is its own: one shared with the gRPC API would take users' calls too."""
    w = config.worker_address
    if w and not w.endswith(":0") and w in (config.grpc_address, config.http_address):
        raise InvalidSpec("--worker-address", f"{w} is already the coordinator's "
                          f"{'gRPC' if w == config.grpc_address else 'HTTP'} address: give the relay a port of its own")


class RunningCoordinator:
    """A started coordinator (gRPC server + domain); `async with` it or call start/stop."""

    def __init__(self, config: CoordinatorConfig, lease: Lease | None = None) -> None:
        self.config = config
        self.store = open_store(config.db or default_db_path())
        if lease is not None:  # several coordinators on PostgreSQL: writes only while leading
            self.store.fence_with(lease)  # type: ignore[attr-defined]
        # In Kubernetes, failed workers' Nodes are labelled and tainted (coordinator/health/k8s_taint.py).
        # With --k8s-taint-devices a failed GPU's DRA device is tainted, its node only host-wide.
        # Observe mode (--health-observe) taints nothing.
        taints = (config.k8s_taint_nodes or config.k8s_taint_devices) and not config.health_observe
        self.tainter = NodeTainter(devices=config.k8s_taint_devices, host_workers=lambda host: self.core.fleet.on_host(host)) \
            if taints else None
        if (config.k8s_taint_nodes or config.k8s_taint_devices) and config.health_observe:
            log.warning("--health-observe: --k8s-taint-nodes/--k8s-taint-devices taint nothing while fleet health only observes")
        # Verdict changes to remediation hooks (coordinator/health/hooks.py): the delivery log is
        # written on the loop, the POSTs on the hooks' own threads.
        urls = list(config.webhook)
        self.hooks = HookSender(urls, self._log_delivery, log_so_far=self.store.hook_deliveries(),
                                source=f"//ringleader/{socket.gethostname()}", start=False) if urls else None
        self._loop: asyncio.AbstractEventLoop | None = None
        observers = [o.observe for o in (self.tainter, self.hooks) if o is not None]
        self.core = Coordinator(self.store, core_timings(config), health_observers=observers,
                                quarantine_max_share=config.quarantine_max_share, health_observe=config.health_observe)
        if config.floors:  # read and checked before anything is bound: a bad row refuses to start
            from ringleader_app.floors_file import load_floors
            self.core.control.expectations.floors = load_floors(config.floors)
        self.metrics = CoordinatorMetrics(self.core)
        # The workers' credentials, shared by gRPC (registration, ApproveWorker) and REST (approve).
        sec_ = config.security
        trusted = not sec_.users_token and not sec_.workers_token and not exposed(config)
        self.identities = WorkerIdentities(self.store, token_review=TokenReviewer() if config.k8s_token_review else None,
                                           trusted_host=trusted)
        if lease is not None:
            self.metrics.registry.register(LeaseCollector(lease))
            # A commit that failed (the database lost, failed over): this process's memory is ahead
            # of what is stored, so it steps down (exit 3) and a standby leads from the database.
            self.core.on_commit_failure = lambda exc: lease.lost(
                f"a commit failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}); "
                "what this coordinator holds in memory is ahead of the database")
        self.sweeper = Sweeper(self.core, self.core.fleet, config.check_every)
        self.server: EdgeServer | None = None
        self.http = None
        self.grpc_target = ""
        self.workers_target = ""  # the relay's address (--worker-address), "" without one
        self.http_url = ""
        self._warner: asyncio.Task | None = None

    async def start(self) -> "RunningCoordinator":
        warning = check_exposure(self.config)  # before anything is bound
        check_worker_address(self.config)
        check_ports(self.config)
        try:
            await self._start()
            if warning:
                log.warning("%s", warning)  # now, before anyone is told the coordinator is up
                self._warner = asyncio.create_task(self._repeat_warning(warning))
        except BaseException:
            await self.stop(grace=0)  # release the ports and the store of a half-started coordinator
            raise
        return self

    def _log_delivery(self, d) -> None:
        """A hook thread's delivery record, written by the loop (the store's one writer)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._write_delivery, d)

    def _write_delivery(self, d) -> None:
        try:
            self.store.put_hook_delivery(d)
        except Exception:  # noqa: BLE001 - a closed store or a standby's fence: the log misses one row
            log.exception("hook delivery log: could not record %s", d.event_id)

    async def _start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.hooks:
            self.hooks.start()  # its log is written by this loop from here
        sec = self.config.security
        access = Access(sec.users_token, sec.workers_token)
        await self.core.start()
        self.sweeper.start()
        self.server, port = await start_server(self.core, self.config.grpc_address,
                                               interceptors=[self.metrics.interceptor, AuthInterceptor(access)],
                                               credentials=sec.grpc_credentials(),
                                               forget_workers=sec.forget_workers, identities=self.identities,
                                               relay_address=self.config.worker_address,
                                               relay_settings=settings_env(sec), relay_at=self.config.relay_at,
                                               relay_share=self.config.relay_share, relay_cpus=self.config.relay_cpus)
        self.grpc_target = with_port(self.config.grpc_address, port)
        if self.server.relay:
            self.workers_target = with_port(self.config.worker_address, self.server.relay.port)
            self.metrics.registry.register(RelayCollector(self.server.relay))
        if self.config.http_address:
            # Imported here: a coordinator without HTTP runs without FastAPI installed.
            from dashboard.app import create_app
            from dashboard.guard import GuardConfig
            from dashboard.server import HttpServer

            # Without a users' token only loopback names are served (DNS rebinding), unless the
            # operator chose to be open.
            guard = GuardConfig(access, metrics_auth=sec.metrics_auth,
                                any_host=access.needs_token("users") or sec.insecure,
                                client_certs=bool(sec.tls.cert and sec.tls.ca))
            # On the gRPC edge's loop: the reads from its read view, the other routes on this loop.
            app = create_app(self.core, self.metrics, guard, self.identities, reads=self.server.view,
                             core_loop=self._loop, flush=self.server.feed.flush)
            self.http = HttpServer(app, self.config.http_address,
                                   tls=(sec.tls.cert, sec.tls.key) if sec.tls.cert else None,
                                   client_ca=sec.tls.ca or None, loop=self.server.edge.loop)
            await self.http.start()
            self.http_url = self.http.url
        self.core.serving()  # load shedding measures the loop from here (coordinator/core/load.py)
        log.info("coordinator gRPC on %s%s (db %s)", self.grpc_target, " (TLS)" if sec.tls.cert else "",
                 redacted(self.config.db or default_db_path()))
        if exposed(self.config) and not sec.tls.cert:
            log.warning("serving off loopback without TLS (--tls-cert/--tls-key): tokens and results "
                        "cross the network in clear text")

    async def _repeat_warning(self, warning: str) -> None:
        while True:
            await asyncio.sleep(self.config.insecure_warning_s)
            log.warning("%s", warning)

    async def stop(self, grace: float | None = None) -> None:
        if self._warner:
            self._warner.cancel()
        await self.sweeper.stop()
        await self.core.stop()
        if self.http:
            await self.http.stop()
        if self.server:
            await self.server.stop(self.config.drain_timeout if grace is None else grace)
        if self.hooks:  # before the store: its last records are written by the loop
            await asyncio.to_thread(self.hooks.close)
            await asyncio.sleep(0)
        self.core.close()
        self.store.close()
        if self.tainter:
            await asyncio.to_thread(self.tainter.close)


    async def __aenter__(self) -> "RunningCoordinator":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop(grace=0)


async def serve(config: CoordinatorConfig) -> None:
    lease = None
    if is_postgres(config.db):  # one of several coordinators: lead first (ringleader_app/standby.py)
        from ringleader_app.standby import stand_by

        check_ports(config)  # the standby serves on the same addresses

        lease = await stand_by(config)
    running = await RunningCoordinator(config, lease).start()
    # What it holds now leaves the collector's passes; passes on a clock too, where the workers'
    # streams are the relay's (coordinator/shell/gcpace.py says why not otherwise).
    pacer = tune_collector(config.gc_pace if running.workers_target else 0)
    print(f"ringleader coordinator: gRPC {running.grpc_target}"
          + (f", HTTP {running.http_url}" if running.http_url else ""), flush=True)
    if running.workers_target:
        print(f"ringleader coordinator: workers {running.workers_target} (relay)", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            os._exit(1)  # second signal: the user wants out now
        log.info("draining (signal again to force exit)")
        stop.set()

    on_stop_signals(loop, on_signal)
    await stop.wait()
    await running.stop()
    if pacer:
        pacer.stop()
