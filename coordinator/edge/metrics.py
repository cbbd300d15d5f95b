"""Prometheus metrics of the coordinator (served at /metrics by the dashboard app).

Everything lives on the CoordinatorMetrics' own registry (no global state, so tests can run many
coordinators in one process). Names carry their base unit (seconds, bytes, bytes per second) and
counters end in `_total`; labels are low-cardinality only: job state, op, dtype, world size, size
bucket, worker state and backend, gRPC service/method/code. No job id or worker id is a label.

Three sources:
- scrape time (CoordinatorStateCollector): jobs queued/running, queue depth and age, workers by
  state, worker reports refused (a report about a job the worker is no member of, a result
  row that is not the job's), read from the Coordinator's in-memory state when Prometheus scrapes;
- job events (Coordinator.add_listener): finished jobs, queue wait, job duration, collective
  results (busbw and op latency histograms, rows failing the data check);
- the gRPC server (coordinator/edge/rpc_metrics.py's RpcMetricsInterceptor): RPC latency by method
  and status code;
- the HTTP app (dashboard/http_metrics.py): REST latency by method, route template and status.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Iterable, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from coordinator.edge.baseline_metrics import BaselineRegressionsCollector
from coordinator.shell.facade import Coordinator
from coordinator.edge.fleet_metrics import FleetHealthCollector
from coordinator.edge.rpc_metrics import RpcMetricsInterceptor
from coordinator.edge.trend_metrics import TrendCollector
from coordinator.edge.load_metrics import LoadCollector
from ringleader import __version__, checks, states
from ringleader.v1 import jobs_pb2 as pb

T = TypeVar("T")

# Upper bounds (inclusive) of the size buckets that label collective metrics, nccl-tests sizes in
# binary units. Five buckets keep the label set small while separating latency-bound small
# messages from bandwidth-bound large ones.
SIZE_BUCKETS: tuple[tuple[int, str], ...] = (
    (64 << 10, "<=64K"), (1 << 20, "<=1M"), (16 << 20, "<=16M"), (256 << 20, "<=256M"))
SIZE_BUCKET_LABELS = tuple(label for _, label in SIZE_BUCKETS) + (">256M",)

# Per-op device time: from a few microseconds (small messages on NVLink) to seconds (GiB on gloo).
OP_LATENCY_BUCKETS = (5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025,
                      0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
QUEUE_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0,
                      1800.0, 3600.0)
# Bus bandwidth of each result, bytes/s: from gloo on small messages (MB/s) to NVLink and NVLS
# (hundreds of GB/s); 10-25 % apart where GPU fabrics land, so medians and the alert that
# compares against them (deploy/prometheus/rules/ringleader.rules.yml) resolve a 10 % drop.
BUSBW_BUCKETS = (1e6, 1e7, 1e8, 1e9, 2.5e9, 5e9, 1e10, 2e10, 4e10, 6e10, 8e10, 1e11, 1.25e11, 1.5e11,
                 1.75e11, 2e11, 2.25e11, 2.5e11, 2.75e11, 3e11, 3.3e11, 3.6e11, 4e11, 4.5e11, 5e11, 6e11,
                 7e11, 8e11, 1e12, 1.25e12)
JOB_DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
                        3600.0, 7200.0)

FINAL_STATES = states.TERMINAL
WORKER_STATES = tuple(states.WORKERS.table)
# The worker messages whose reports can be refused (dispatch.Dispatcher.rejected's keys): all
# exported from the start, at 0, so a rate() sees the first refusal.
REJECTED_KINDS = ("progress", "result", "store_ready", "done")


def size_bucket(size_bytes: int) -> str:
    """The size-bucket label of a message size: "<=64K", "<=1M", "<=16M", "<=256M" or ">256M"."""
    for bound, label in SIZE_BUCKETS:
        if size_bytes <= bound:
            return label
    return ">256M"


def _state_name(state: int) -> str:
    return pb.JobState.Name(state).lower()


def _worker_state_name(state: int) -> str:
    return pb.WorkerState.Name(state).lower()


def _retry(read: Callable[[], T], attempts: int = 5) -> T:
    """Read the coordinator's in-memory state from the scrape thread (the web framework may run
    the /metrics handler off the loop): a dict resized mid-iteration raises; read it again."""
    for _ in range(attempts - 1):
        try:
            return read()
        except RuntimeError:
            continue
    return read()


class CoordinatorStateCollector(Collector):
    """Gauges computed when Prometheus scrapes, from the coordinator's in-memory state."""

    def __init__(self, core: Coordinator, clock: Callable[[], float] = time.time) -> None:
        self.core = core
        self.clock = clock

    def describe(self) -> Iterable:
        return [*self._families(), self._rejected()]

    @staticmethod
    def _rejected() -> CounterMetricFamily:
        return CounterMetricFamily("ringleader_worker_reports_rejected",
                                   "Worker reports refused: about a job the worker is no member of (or not at "
                                   "its rank), or result rows that are not the job's", labels=["kind"])

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily("ringleader_jobs", "Unfinished jobs by state (queued, running)", labels=["state"]),
            GaugeMetricFamily("ringleader_queue_depth", "Jobs waiting for workers"),
            GaugeMetricFamily("ringleader_queue_oldest_job_age_seconds",
                              "Time since the oldest queued job was submitted (0 when the queue is empty)"),
            GaugeMetricFamily("ringleader_workers", "Registered worker daemons by state and backend",
                              labels=["state", "backend"]),
        )

    def collect(self) -> Iterable:
        jobs, depth, oldest, workers = self._families()
        queued, running, created = _retry(self.core.book.counts)
        jobs.add_metric([_state_name(pb.QUEUED)], queued)
        jobs.add_metric([_state_name(pb.RUNNING)], running)
        depth.add_metric([], queued)
        oldest.add_metric([], max(0.0, self.clock() - created) if created else 0.0)
        # Counted by (state number, backend) as workers change (WorkerRegistry.by_state), named
        # once per label set: a walk of every worker at each scrape held the loop 5-9 ms with
        # 3,000-5,000 workers.
        by_state = _retry(lambda: dict(self.core.workers.by_state))
        counts = {(_worker_state_name(s), backend): by_state.get((s, backend), 0)
                  for backend in {b for _, b in by_state} for s in WORKER_STATES}  # zeros included
        for (state, backend), n in sorted(counts.items()):
            workers.add_metric([state, backend], n)
        rejected = self._rejected()
        counted = _retry(lambda: dict(self.core.dispatch.rejected))
        for kind in sorted({*REJECTED_KINDS, *counted}):  # keys are the proto's message names: bounded
            rejected.add_metric([kind], counted.get(kind, 0))
        return [jobs, depth, oldest, workers, rejected]


class CoordinatorMetrics:
    def __init__(self, core: Coordinator) -> None:
        r = self.registry = CollectorRegistry()
        self.core = core
        Gauge("ringleader_build_info", "Version of the running coordinator", ["version", "role"],
              registry=r).labels(__version__, "coordinator").set(1)
        r.register(CoordinatorStateCollector(core))
        r.register(FleetHealthCollector(core.fleet))
        r.register(BaselineRegressionsCollector(core.store))
        self.trends = TrendCollector(core.store)
        r.register(self.trends)
        r.register(LoadCollector(core.lag, core.intake, core.stalls))

        # Jobs, from state-change events.
        self.jobs_submitted = Counter("ringleader_jobs_submitted_total", "Jobs accepted", registry=r)
        self.jobs_started = Counter("ringleader_jobs_started_total",
                                    "Jobs placed on workers; warm=true when they reused an initialised process group",
                                    ["warm"], registry=r)
        self.jobs_finished = Counter("ringleader_jobs_finished_total", "Jobs finished, by final state",
                                     ["state"], registry=r)
        self.queue_wait = Histogram("ringleader_job_queue_wait_seconds",
                                    "Time from submission to start (observed when a job starts)",
                                    buckets=QUEUE_WAIT_BUCKETS, registry=r)
        self.job_duration = Histogram("ringleader_job_duration_seconds",
                                      "Time from start to end of jobs that ran, by final state",
                                      ["state"], buckets=JOB_DURATION_BUCKETS, registry=r)
        self.check_duration = Histogram("ringleader_check_duration_seconds",
                                        "Time from start to end of fleet health check jobs, by check kind and final state",
                                        ["kind", "state"], buckets=JOB_DURATION_BUCKETS, registry=r)
        for s in FINAL_STATES:
            self.jobs_finished.labels(_state_name(s))
            for check in checks.KINDS:  # every series from the start: a board's panel is never empty
                self.check_duration.labels(check, _state_name(s))
        for warm in ("true", "false"):
            self.jobs_started.labels(warm)

        # Collective results (one per size of a sweep, as rank 0 streams them).
        coll = ["op", "dtype", "world_size", "size_bucket"]
        # A histogram, not a last-value gauge: every result of a scrape interval counts, and
        # rate(_sum) / rate(_count) is the mean busbw of a label set over any window.
        self.busbw = Histogram("ringleader_collective_busbw_bytes_per_second",
                               "Bus bandwidth of each result (nccl-tests busbw), bytes/s",
                               coll, buckets=BUSBW_BUCKETS, registry=r)
        self.op_latency = Histogram("ringleader_collective_op_latency_seconds",
                                    "Mean time per op of each result (slowest rank), seconds",
                                    coll, buckets=OP_LATENCY_BUCKETS, registry=r)
        self.wrong_results = Counter("ringleader_collective_wrong_results_total",
                                     "Result rows whose data check found wrong elements", ["op", "dtype"], registry=r)

        self.interceptor = RpcMetricsInterceptor(r)
        core.add_listener(self._on_event)

    def _on_event(self, event: pb.JobEvent, job: pb.Job) -> None:
        kind = event.WhichOneof("event")
        if kind == "state":
            self._on_state(event, job)
        elif kind == "result":
            self._on_result(event.result)

    def _on_state(self, event: pb.JobEvent, job: pb.Job) -> None:
        # Only recorded events carry a sequence number; the queue's "waiting for ..." reason
        # updates are published with seq 0 and are no transitions.
        if not event.seq:
            return
        state = event.state.state
        if state == pb.QUEUED and event.seq == 1:  # the first event of a job is its submission
            self.jobs_submitted.inc()
        elif state == pb.RUNNING:
            self.jobs_started.labels("true" if job.warm_start else "false").inc()
            if job.created_at and job.started_at:
                self.queue_wait.observe(max(0.0, job.started_at - job.created_at))
        elif state in FINAL_STATES:
            name = _state_name(state)
            self.jobs_finished.labels(name).inc()
            if job.started_at and job.finished_at:  # jobs cancelled while queued never ran
                self.job_duration.labels(name).observe(max(0.0, job.finished_at - job.started_at))
                check = job.spec.WhichOneof("kind")
                if check in checks.KINDS:  # a bounded label: the check kinds of the kind table
                    self.check_duration.labels(check, name).observe(max(0.0, job.finished_at - job.started_at))

    def _on_result(self, r: pb.SizeResult) -> None:
        labels = (r.op, r.dtype, str(r.world_size), size_bucket(r.size_bytes))
        if r.size_bytes:  # barrier moves no data: latency only
            self.busbw.labels(*labels).observe(r.busbw_gbps * 1e9)
        if r.time_us > 0:
            self.op_latency.labels(*labels).observe(r.time_us * 1e-6)
        if r.wrong:
            self.wrong_results.labels(r.op, r.dtype).inc()

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    async def render_off_loop(self) -> tuple[bytes, str]:
        """`render`, its text written in a thread: the families are read here, on the loop (the
        coordinator's live state), and writing their 500-odd samples, which held the loop 10-15
        ms a scrape with 3,000 workers, gives the loop the GIL back at every switch interval."""
        families = list(self.registry.collect())
        return await asyncio.to_thread(generate_latest, _Collected(families)), CONTENT_TYPE_LATEST


class _Collected:
    """Families already collected, as generate_latest reads a registry."""

    def __init__(self, families: list) -> None:
        self.families = families

    def collect(self) -> Iterable:
        return self.families
