"""The coordinator's facade: the one object that servicers, the REST layer and metrics call.

    users    submit, get, list_jobs, cancel, watch, job_logs, list_workers, queued_jobs,
             running_jobs, add_listener
    workers  register, disconnect, on_message (one call per message up a daemon's stream)
    process  start (reload unfinished jobs, start the liveness tick), stop

Behind it: jobs.JobBook (queue, running jobs, the job state machine), events.EventBus (stored
and live events, watchers, listeners), registry.WorkerRegistry (connections), groups.Groups
(warm groups), dispatch.Dispatcher (placement and the worker protocol) and liveness.Liveness
(heartbeats, stalls, blame, requeue). Everything runs on one asyncio loop: no locks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import AsyncIterator, Iterable

from coordinator import admission
from coordinator.api import JobStore
from coordinator.dispatch import Dispatcher
from coordinator.events import EventBus, Listener
from coordinator.groups import Groups
from coordinator.jobs import JobBook, Page
from coordinator.liveness import Liveness, Timings, Verdicts
from coordinator.registry import WorkerConn, WorkerRegistry
from ringleader import jobspec
from ringleader.errors import FailedPrecondition
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

log = logging.getLogger("ringleader.coordinator")

__all__ = ["Coordinator", "Timings"]


class Coordinator:
    def __init__(self, store: JobStore, timings: Timings | None = None) -> None:
        self.store = store
        self.timings = timings or Timings()
        self.events = EventBus(store)
        self.book = JobBook(store, self.events)
        self.workers = WorkerRegistry()
        self.groups = Groups()
        self.dispatch = Dispatcher(self.book, self.workers, self.groups, self.timings)
        self.liveness = Liveness(self.timings, self.workers, self.book.running, Verdicts(
            worker_lost=self.disconnect, job_failed=self.dispatch.fail, requeue=self.dispatch.requeue))
        self._ticker: asyncio.Task | None = None

    # ---- process ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Reload unfinished jobs; RUNNING ones wait a grace period for their workers to return."""
        self.book.load(reattach_deadline=time.monotonic() + self.timings.reconcile_grace_s)
        self._ticker = asyncio.create_task(self._tick_forever())

    async def stop(self) -> None:
        if self._ticker:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        self.events.close()

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self.timings.tick_s)
            try:
                self.liveness.tick()
            except Exception:  # a bug here must not stop failure detection for good
                log.exception("coordinator tick failed")

    # ---- users -----------------------------------------------------------------------------

    def submit(self, spec: pb.JobSpec) -> pb.Job:
        valid = jobspec.normalize(spec)
        admission.check(valid, (w.reg for w in self.workers.connected()))
        job = self.book.submit(valid)
        self.dispatch.schedule()
        return self.get(job.id)

    def get(self, job_id: str) -> pb.Job:
        return self.book.get(job_id)

    def list_jobs(self, states: Iterable[int] = (), op: str = "", limit: int = 0, before_id: str = "") -> Page:
        """A page of jobs, newest first, without results; `next_before` continues it."""
        return self.book.page(states, op, limit, before_id)

    def cancel(self, job_id: str, reason: str = "") -> pb.Job:
        reason = reason or "cancelled by user"
        if job_id in self.book.queued:
            self.book.finish(job_id, pb.CANCELLED, reason)
        elif job_id in self.book.running:
            self.dispatch.end(self.book.running[job_id], pb.CANCELLED, reason)
        else:
            job = self.store.get(job_id)  # NotFound for unknown ids
            raise FailedPrecondition(f"job {job_id} is already {pb.JobState.Name(job.state)}")
        self.dispatch.schedule()
        return self.get(job_id)

    def watch(self, job_id: str) -> AsyncIterator[pb.JobEvent]:
        """Stored events, then live ones, until the job reaches a terminal state."""
        return self.events.watch(job_id)

    def job_logs(self, job_id: str) -> pb.JobLogs:
        """Each rank's captured stderr, for every rank the job was placed on (NotFound if unknown)."""
        job = self.store.get(job_id)
        logs = self.store.rank_logs(job_id)
        return pb.JobLogs(job_id=job_id, ranks=[
            pb.RankLog(rank=w.rank, worker_id=w.worker_id, received=w.rank in logs, text=logs.get(w.rank, ""))
            for w in sorted(job.workers, key=lambda w: w.rank)])

    def list_workers(self) -> list[pb.WorkerInfo]:
        return [w.info() for w in self.workers.all()]

    def queued_jobs(self) -> list[pb.Job]:
        """Jobs waiting for workers, from memory (no store read): for metrics and the dashboard."""
        return [q.job for q in self.book.queued.values()]

    def running_jobs(self) -> list[pb.Job]:
        return [rj.job for rj in self.book.running.values()]

    def add_listener(self, fn: Listener) -> None:
        """Call `fn(event, job)` for every job event as it happens, on the coordinator's loop; it
        must not block. Metrics and live views use it."""
        self.events.add_listener(fn)

    # ---- workers ---------------------------------------------------------------------------

    def register(self, reg: wpb.Register) -> WorkerConn:
        admission.check_registration(reg)
        return self.dispatch.register(reg)

    def disconnect(self, conn: WorkerConn, why: str) -> None:
        self.dispatch.disconnect(conn, why)

    def on_message(self, conn: WorkerConn, msg: wpb.WorkerMessage) -> None:
        self.dispatch.on_message(conn, msg)
