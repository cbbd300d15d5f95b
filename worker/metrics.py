"""Prometheus metrics of a worker daemon process, served on `ringleader worker --metrics-address`.

One HTTP endpoint per process: with `--device all` it serves every daemon of the process, each
series labelled with its `device` (cpu, cuda:0, ...). The server is prometheus_client's WSGI
server in a daemon thread, so a scrape never runs on (or blocks) the daemons' asyncio loop; all
values are read from the daemons when Prometheus scrapes, on the server's thread.

Metrics (labels: device, gpu, UUID unless said otherwise):
    ringleader_build_info{version,role="worker"}          1
    ringleader_worker_info{...,worker_id,backend,device_name}  1 (joins device to worker id)
    ringleader_worker_connected                           1 while registered with the coordinator
    ringleader_worker_busy                                1 while running a job
    ringleader_worker_executor_restarts_total             executors replaced (crash, abort)
    ringleader_worker_jobs_total{outcome}                 ranks run to the end, by outcome
    ringleader_worker_ops_total                           collective ops run (warm-up included)
    ringleader_worker_device_memory_total_bytes           GPU memory (NVML; else the device facts)
    ringleader_worker_device_memory_used_bytes            GPU memory in use (NVML only)
    ringleader_worker_gpu_utilization_ratio               0..1, NVML's utilisation over its last sample period
    ringleader_worker_host_memory_total_bytes             host memory, no device label (CPU workers)
    ringleader_worker_host_memory_used_bytes              total - available
    ringleader_worker_gpu_*                                GPU telemetry (worker/telemetry.py: XIDs, ECC,
                                                          clocks and their event reasons, temperature, power,
                                                          PCIe, NVLink, foreign processes)

`gpu` and `UUID` are the labels NVIDIA's dcgm-exporter gives its series: NVML's index of the GPU
(on the host, whatever CUDA_VISIBLE_DEVICES renumbered) and its UUID ("GPU-..."), so a query can
join the two exporters, e.g. `ringleader_worker_busy * on (UUID) group_right DCGM_FI_DEV_POWER_USAGE`.
Both are empty (so absent) for CPU daemons.

The same HTTP server answers /healthz and /readyz for Kubernetes probes (worker/health.py).

NVML comes from the optional `pynvml` module (package nvidia-ml-py), imported on the first
scrape of a CUDA daemon; without it (CPU machines, CI) only what the daemon knows is exported.
For power, clocks, NVLink and ECC counters run NVIDIA's dcgm-exporter next to the workers.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
from socketserver import ThreadingMixIn
from typing import Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ringleader import __version__
from worker import health, telemetry

log = logging.getLogger("ringleader.worker")

# Outcomes of a rank, as the daemon reports them to the coordinator (JobDone.ok / failure).
OUTCOMES = ("succeeded", "rank_error", "peer_error", "executor_died", "aborted", "failed")

DEFAULT_PORT = 9401  # the port deploy/ gives workers' /metrics (9400 is dcgm-exporter's)


def parse_address(address: str) -> tuple[str, int]:
    """"HOST:PORT", "[v6]:PORT" or ":PORT" (all interfaces) -> (host, port); ValueError otherwise."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


class _Nvml:
    """Lazy NVML: imported and initialised on first use; unavailable for good if that fails."""

    def __init__(self) -> None:
        self._nvml = None
        self._tried = False
        self._handles: dict[str, object] = {}

    def module(self):
        if not self._tried:
            self._tried = True
            try:
                import pynvml

                pynvml.nvmlInit()
                self._nvml = pynvml
            except Exception as exc:  # ImportError, or NVMLError (no driver)
                log.info("GPU metrics without NVML (%s: %s)", type(exc).__name__, exc)
        return self._nvml

    def handle(self, device: str, uuid: str):
        """The NVML handle of torch's `cuda:N`: by UUID where known (CUDA_VISIBLE_DEVICES renumbers
        devices for CUDA but not for NVML), else through CUDA_VISIBLE_DEVICES, else by index."""
        nvml = self.module()
        if nvml is None:
            return None
        if device not in self._handles:
            self._handles[device] = self._lookup(nvml, int(device.split(":")[1]), uuid)
        return self._handles[device]

    @staticmethod
    def _lookup(nvml, index: int, uuid: str):
        if uuid:
            for candidate in (uuid, uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"):
                try:
                    return nvml.nvmlDeviceGetHandleByUUID(candidate)
                except Exception:
                    continue
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        try:
            if index < len(visible):
                v = visible[index]
                return nvml.nvmlDeviceGetHandleByIndex(int(v)) if v.isdigit() else nvml.nvmlDeviceGetHandleByUUID(v)
            return nvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            log.info("no NVML handle for cuda:%d (%s)", index, exc)
            return None


def host_memory() -> tuple[int, int] | None:
    """(total, used) bytes of host memory; used = total - MemAvailable (Linux /proc/meminfo)."""
    try:
        fields = {}
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                fields[key] = int(rest.split()[0]) * 1024
        return fields["MemTotal"], fields["MemTotal"] - fields.get("MemAvailable", fields.get("MemFree", 0))
    except (OSError, KeyError, ValueError, IndexError):
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            return total, total - os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        except (ValueError, OSError):
            return None


class WorkerCollector(Collector):
    """Reads the daemons at scrape time (on the HTTP server's thread)."""

    def __init__(self, daemons: list) -> None:
        self.daemons = daemons
        self.nvml = _Nvml()
        self._lock = threading.Lock()  # concurrent scrapes: one NVML setup, one reader at a time

    def describe(self) -> Iterable:
        return []

    def collect(self) -> Iterable:
        with self._lock:
            return self._collect()

    def _collect(self) -> list:
        build = GaugeMetricFamily("ringleader_build_info", "Version of the running worker daemon",
                                  labels=["version", "role"])
        build.add_metric([__version__, "worker"], 1)
        dev_labels = ["device", "gpu", "UUID"]
        info = GaugeMetricFamily("ringleader_worker_info", "Worker daemons of this process (value 1)",
                                 labels=dev_labels + ["worker_id", "backend", "device_name"])
        connected = GaugeMetricFamily("ringleader_worker_connected",
                                      "1 while the daemon is registered with the coordinator", labels=dev_labels)
        busy = GaugeMetricFamily("ringleader_worker_busy", "1 while the daemon runs a job", labels=dev_labels)
        restarts = CounterMetricFamily("ringleader_worker_executor_restarts",
                                       "Executor processes replaced (died, or killed to abort a job)",
                                       labels=dev_labels)
        jobs = CounterMetricFamily("ringleader_worker_jobs", "Job ranks ended on this daemon, by outcome",
                                   labels=dev_labels + ["outcome"])
        ops = CounterMetricFamily("ringleader_worker_ops", "Collective ops run by the executors (warm-up included)",
                                  labels=dev_labels)
        mem_total = GaugeMetricFamily("ringleader_worker_device_memory_total_bytes", "Device memory",
                                      labels=dev_labels)
        mem_used = GaugeMetricFamily("ringleader_worker_device_memory_used_bytes", "Device memory in use (NVML)",
                                     labels=dev_labels)
        util = GaugeMetricFamily("ringleader_worker_gpu_utilization_ratio",
                                 "Fraction of the last NVML sample period in which a kernel ran", labels=dev_labels)
        host_total = GaugeMetricFamily("ringleader_worker_host_memory_total_bytes", "Host memory")
        host_used = GaugeMetricFamily("ringleader_worker_host_memory_used_bytes",
                                      "Host memory in use (total - available)")
        any_cpu = False
        for d in list(self.daemons):
            dev = d.config.device
            facts = dataclasses.asdict(d.device) if d.device else {}
            ids = [dev, *self._gpu_ids(dev, facts)]
            info.add_metric(ids + [d.worker_id, facts.get("backend", ""), facts.get("name", "")], 1)
            connected.add_metric(ids, 1 if d.connected.is_set() else 0)
            busy.add_metric(ids, 1 if d.job else 0)
            restarts.add_metric(ids, d.restarts)
            for outcome, n in list(d.jobs_done.items()):
                jobs.add_metric(ids + [outcome], n)
            ops.add_metric(ids, d.ops_run())
            if dev.startswith("cuda"):
                self._gpu(ids, facts, mem_total, mem_used, util)
            else:
                any_cpu = True
        families = [build, info, connected, busy, restarts, jobs, ops, mem_total, mem_used, util]
        # GPU telemetry (worker/telemetry.py): the daemons' last NVML readings.
        readings = [([d.config.device, *self._gpu_ids(d.config.device, dataclasses.asdict(d.device) if d.device else {})],
                     t) for d in list(self.daemons) if getattr(d, "telemetry", None) and (t := d.telemetry.latest())]
        families += telemetry.metric_families(readings, dev_labels)
        if any_cpu:
            mem = host_memory()
            if mem:
                host_total.add_metric([], mem[0])
                host_used.add_metric([], mem[1])
            families += [host_total, host_used]
        return families

    def _gpu_ids(self, dev: str, facts: dict) -> tuple[str, str]:
        """dcgm-exporter's (gpu, UUID) of a CUDA daemon: NVML's index where NVML knows the device,
        else the daemon's own index; the UUID in NVML's "GPU-..." spelling (torch drops the prefix)."""
        if not dev.startswith("cuda") or not facts:
            return "", ""
        uuid = facts.get("uuid", "")
        if uuid and not uuid.startswith(("GPU-", "MIG-")):
            uuid = f"GPU-{uuid}"
        index = str(facts.get("index", ""))
        handle = self.nvml.handle(dev, uuid)
        if handle is not None:
            try:
                index = str(self.nvml.module().nvmlDeviceGetIndex(handle))
            except Exception as exc:  # NVMLError
                log.debug("NVML index of %s unknown: %s", dev, exc)
        return index, uuid

    def _gpu(self, ids: list[str], facts: dict, mem_total, mem_used, util) -> None:
        handle = self.nvml.handle(ids[0], facts.get("uuid", "")) if facts else None
        if handle is not None:
            nvml = self.nvml.module()
            try:
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            except Exception as exc:  # NVMLError: a lost GPU, a driver hiccup
                log.debug("NVML read failed for %s: %s", ids[0], exc)
            else:
                mem_total.add_metric(ids, int(mem.total))
                mem_used.add_metric(ids, int(mem.used))
                util.add_metric(ids, rates.gpu / 100.0)
                return
        if facts.get("memory_bytes"):
            mem_total.add_metric(ids, int(facts["memory_bytes"]))


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args) -> None:  # probes and scrapes every few seconds: no access log
        pass


def _server_class(host: str, port: int) -> type:
    """A threading WSGI server of the address family of `host` (IPv4 or IPv6)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    return type("WorkerHttpServer", (ThreadingMixIn, WSGIServer), {"address_family": family, "daemon_threads": True})


class WorkerMetrics:
    """The metrics of one worker process: its registry and, once served, its HTTP endpoint."""

    def __init__(self, daemons: Iterable = ()) -> None:
        self.daemons: list = list(daemons)
        self.registry = CollectorRegistry()
        self.registry.register(WorkerCollector(self.daemons))
        self._metrics_app = make_wsgi_app(self.registry)
        self._httpd = None
        self.port = 0

    def add(self, daemons: Iterable) -> None:
        self.daemons.extend(daemons)

    def serve(self, host: str, port: int) -> int:
        """Serve /metrics, /healthz and /readyz on host:port (port 0 picks one) from a daemon
        thread; returns the port. Raises OSError when the address cannot be bound."""
        server = _server_class(host, port)
        self._httpd = make_server(host, port, self.wsgi_app, server, handler_class=_QuietHandler)
        threading.Thread(target=self._httpd.serve_forever, name="worker-metrics", daemon=True).start()
        self.port = self._httpd.server_port
        return self.port

    def wsgi_app(self, environ, start_response):
        """/healthz and /readyz (worker/health.py), everything else is prometheus_client's app."""
        check = {"/healthz": health.liveness, "/readyz": health.readiness}.get(environ.get("PATH_INFO", ""))
        if check is None:
            return self._metrics_app(environ, start_response)
        ok, reason = check(list(self.daemons))
        start_response("200 OK" if ok else "503 Service Unavailable",
                       [("Content-Type", "text/plain; charset=utf-8")])
        return [reason.encode() + b"\n"]

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
