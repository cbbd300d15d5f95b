"""The coordinator's facade: the one object that servicers, the REST layer and metrics call.

    users    submit, get, list_jobs, cancel, watch, job_logs, list_workers, queued_jobs,
             book.counts (queued, running, oldest), add_listener, durable
    workers  register, disconnect, on_message (one call per message up a daemon's stream)
    process  start (reload unfinished jobs, start the liveness tick), stop

Behind it: control.Control, the control core as one reactor: every call, worker message and
clock tick becomes one input (coordinator/core/inputs.py) that `Control.handle` applies; the facade
puts what comes back on the workers' streams (`_do`). Control owns the job book, the events, the
worker registry, the warm groups and the scheduler; liveness is a pure function it asks on each
tick. Everything runs on one asyncio loop: no locks. Store writes are grouped: a group commits
COMMIT_EVERY_S after its first write, or when a user's call awaits `durable(at_once=True)` before
it acknowledges a submit or a cancel: a job acknowledged is a job stored.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Iterable

from coordinator.core import admission, paging, writes
from coordinator.core.clock import Now
from coordinator.store.api import JobStore
from coordinator.core.control import Control
from coordinator.core.events import Listener
from coordinator.health.book import DEFAULT_MAX_SHARE
from coordinator.health.fleet import FleetHealth, Observer as HealthObserver
from coordinator.core.inputs import (Alive, Cancel, Cordon, Disconnect, Input, Out, Place, Register, Reload, Submit,
                                     Tick, WorkerMsg)
from coordinator.core.jobs import Page
from coordinator.core.liveness import Timings
from coordinator.shell.stallwatch import StallWatch
from coordinator.core.load import IntakeGate, LagMeter, PassPacer
from coordinator.core.registry import WorkerConn, encode_token
from ringleader import jobspec, kinds
from ringleader.errors import InvalidSpec, Overloaded
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

log = logging.getLogger("ringleader.coordinator")
COMMIT_EVERY_S = 0.01  # a commit a turn was 12.6 % of a draining core: docs/decisions/commit-pacing.md

__all__ = ["Coordinator", "Timings", "WorkerPage"]


@dataclass
class WorkerPage:
    workers: list[pb.WorkerInfo]
    next_page_token: str  # "" on the last page


class Coordinator:
    def __init__(self, store: JobStore, timings: Timings | None = None,
                 health_observers: Iterable[HealthObserver] = (), quarantine_max_share: float = DEFAULT_MAX_SHARE,
                 health_observe: bool = False) -> None:
        self.store = store
        self.timings = timings or Timings()
        self.control = Control(store, self.timings, quarantine_max_share, health_observe)
        self.on_commit_failure: Callable[[BaseException], None] | None = None  # see _committed
        # Control's parts, for readers (metrics, the dashboard, tests); only Control changes them.
        self.events, self.book = self.control.events, self.control.book
        self.workers, self.groups = self.control.workers, self.control.groups
        self.dispatch = self.control.protocol  # its `rejected` counter, under the name metrics read
        self._ticker: asyncio.Task | None = None
        self.stopping = self.closed = False  # see stop() and close()
        self._uncommitted = False  # store writes wait for the next _commit
        self._commit_waiters: list[asyncio.Future] = []
        self.fleet = FleetHealth(self, observers=health_observers)  # health's readers; observers hear of quarantines
        self.alerts: list[str] = []  # what the circuit breaker asked an operator to decide, newest last
        self._place_more = False  # the last pass stopped at its ranks (Timings.pass_ranks): another is due
        self.passes = PassPacer(self._place, more=lambda: self._place_more)
        self.intake = IntakeGate(self.timings.worker_msgs_per_turn)  # users' calls ahead of workers' (load.py)
        self.lag = LagMeter(self.timings.shed_lag_s)  # work refused promptly when saturated
        self.stalls = StallWatch(self.lag, self.timings.stall_warn_s)  # names what stalled the loop, in the log

    # ---- process ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Reload unfinished jobs; RUNNING ones wait a grace period for their workers to return."""
        loop = asyncio.get_running_loop()

        def pending() -> None:  # the first write of a group: commit soon, or once someone waits
            self._uncommitted = True
            loop.call_later(COMMIT_EVERY_S, lambda: self.closed or self._commit())  # the store closes after close()

        self.store.defer_commits(pending)
        self._do(Reload(reattach_deadline=time.monotonic() + self.timings.reconcile_grace_s))
        self._ticker = asyncio.create_task(self._tick_forever())

    def serving(self) -> None:
        """Called once the servers are up: from now the loop's lag is measured (the start-up's
        own stalls, building the HTTP app, are not a saturation to shed for)."""
        self.lag.start()
        if self.timings.stall_warn_s:
            self.stalls.start()

    async def stop(self) -> None:
        """Stop the clock and commit. While the servers drain next, workers' messages still apply (a
        StoreReady dropped left its job's group unformed), not their streams' ends (worker_stream.Inbox)."""
        self.stopping = True
        self.stalls.stop()
        await self.lag.stop()
        if self._ticker:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        self.events.close()
        self._commit()

    def close(self) -> None:
        """The servers have stopped: the last commit; what still comes is dropped, as if killed."""
        self._commit()
        self.closed = True

    async def prefetch(self, job_id: str = "", request_id: str = "") -> None:
        """Where the store would wait on a server to read this job or request id (PostgreSQL, a
        job no longer in its memory), read it now, off the loop: the user call that follows
        answers from memory."""
        if not self.store.resident(job_id, request_id):
            await asyncio.get_running_loop().run_in_executor(None, self.store.prefetch, job_id, request_id)

    async def durable(self, at_once: bool = False) -> None:
        """Return once every store write made so far is committed: at the end of this turn, with
        the rest of its writes, or `at_once` (users' acknowledgements: docs/architecture.md says
        why). A store that commits off the loop (PostgreSQL) is waited for either way."""
        if self._uncommitted:
            waiter = asyncio.get_running_loop().create_future()
            if not self._commit_waiters and not at_once:  # the first to wait: at the end of this turn
                asyncio.get_running_loop().call_soon(self._commit)
            self._commit_waiters.append(waiter)
            if at_once:
                self._commit()  # the waiters before it are settled too
            await waiter

    def _commit(self) -> None:
        waiters, self._commit_waiters, self._uncommitted = self._commit_waiters, [], False
        try:
            later = self.store.commit()
        except Exception as exc:
            self._settle(waiters, exc)
            return
        if later is not None:  # committing off the loop (the PostgreSQL store): settle when durable
            asyncio.wrap_future(later).add_done_callback(lambda f: self._committed(waiters, f.exception()))
        else:
            self._settle(waiters, None)

    def _committed(self, waiters: list[asyncio.Future], exc: BaseException | None) -> None:
        """A commit off the loop ended. One that failed left this coordinator's memory ahead of the
        database (a job whose row was never written, still known by its request id): whoever
        waits hears the failure, but first `on_commit_failure` (a leader on PostgreSQL steps down,
        and a standby leads from what is stored) so nothing is answered from that memory again."""
        if exc is not None and self.on_commit_failure is not None:
            self.on_commit_failure(exc)
        self._settle(waiters, exc)

    @staticmethod
    def _settle(waiters: list[asyncio.Future], exc: BaseException | None) -> None:
        if exc is not None:  # a full or failing disk, a lost lease: whoever waits must not say "stored"
            log.error("job store commit failed: %s", exc, exc_info=exc)
        for w in waiters:
            if not w.done():
                w.set_exception(exc) if exc is not None else w.set_result(None)

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self.timings.tick_s)
            try:
                self.tick()
                self.store.downsample_trends(time.time())  # the trends' history bounded, a short share a tick
            except Exception:  # a bug here must not stop failure detection for good
                log.exception("coordinator tick failed")

    def tick(self, now: float | None = None) -> None:
        """One clock tick (`now`: time.monotonic()): liveness verdicts, forgotten workers. Its
        placement pass is the pacer's, in a later turn: the two together held the loop 60-90 ms."""
        now = time.monotonic() if now is None else now
        self._soon(Tick(now, heard=self.intake.heard_until(now)))

    def _do(self, inp: Input) -> Out:
        """Apply one input to the control core and put what it sends on the workers' streams;
        the placement pass it asks for runs now."""
        out = self._send(self.control.handle(inp, Now.read()))
        if out.place:
            self._place()
        return out

    def _place(self) -> None:
        self._place_more = self._send(self.control.handle(Place(), Now.read())).place

    def _send(self, out: Out) -> Out:
        writes.apply(out.writes, self.store)  # before anyone hears of the input
        self.events.tell(out.events)  # watchers and listeners (metrics, the live views)
        for conn, msg in out.sends:
            conn.send(msg)  # None (inputs.CLOSE) ends the stream
        if out.alerts:
            self.alerts = (self.alerts + out.alerts)[-100:]
        if out.health:
            self.fleet.notify(out.health)  # after the input: an observer may read the facade
        return out

    def _soon(self, inp: Input) -> Out:
        """`_do`, its placement pass shared with every input of this turn of the loop."""
        out = self._send(self.control.handle(inp, Now.read()))
        if out.place:
            self.passes.soon()
        return out

    # ---- users -----------------------------------------------------------------------------

    def submit(self, spec: pb.JobSpec, request_id: str = "") -> pb.Job:
        """Accept a job. A repeat of a `request_id` returns the job it created (InvalidSpec
        naming request_id if the spec differs). Await `durable()` before acknowledging it."""
        valid = jobspec.normalize(spec)
        if request_id:
            jobspec.check_request_id(request_id)
            if known := self.store.job_for_request(request_id):
                job = self.get(known)
                if job.spec != valid.spec:
                    raise InvalidSpec("request_id", f"{request_id!r} was used for job {known}, with another spec")
                return job
        # Nothing else queued: placed now (RUNNING if it started). Behind a queue: answered QUEUED,
        # placed at the end of the turn with its other inputs (a pass each was a fifth of a drain's CPU).
        place = self._soon if self.book.queued else self._do
        return self.control.copy_of(place(Submit(valid, request_id)).job)

    def get(self, job_id: str) -> pb.Job:
        jobspec.check_text("job_id", job_id)
        return self.control.get(job_id)

    async def list_jobs_off_loop(self, states: Iterable[int] = (), op: str = "", limit: int = 0,
                                 before_id: str = "") -> Page:
        """`list_jobs` for a user call: the store's rows are read on another thread (a server's
        round trip, or the wait for the groups in flight, never holds up the loop)."""
        kinds.check_listed(op)
        jobspec.check_text("before_id", before_id)
        states = list(states)
        rows = await asyncio.get_running_loop().run_in_executor(None, self.book.rows, states, op, limit, before_id)
        return self.list_jobs(states, op, limit, before_id, rows)

    def list_jobs(self, states: Iterable[int] = (), op: str = "", limit: int = 0, before_id: str = "",
                  rows: list[pb.Job] | None = None) -> Page:
        """A page of jobs, newest first, without results; `next_before` continues it."""
        kinds.check_listed(op)
        jobspec.check_text("before_id", before_id)
        page = self.control.page(states, op, limit, before_id, rows)
        keep = paging.fitting(job.ByteSize() for job in page.jobs)
        if keep < len(page.jobs):  # full before its limit: continue after the last one kept
            return Page(page.jobs[:keep], page.jobs[keep - 1].id)
        return page

    def cancel(self, job_id: str, reason: str = "") -> pb.Job:
        jobspec.check_text("job_id", job_id)
        jobspec.check_text("reason", reason)
        out = self._soon(Cancel(job_id, reason or "cancelled by user"))
        return self.control.copy_of(out.job) if out.job is not None else self.get(job_id)  # out.job: no rows to read

    def watch(self, job_id: str) -> AsyncIterator[pb.JobEvent]:
        """Stored events, then live ones, until the job reaches a terminal state."""
        return self.events.watch(job_id)

    def job_logs(self, job_id: str) -> pb.JobLogs:
        """Each rank's captured stderr, for every rank the job was placed on (NotFound if unknown).
        Every rank of a SUCCEEDED job reported; those with nothing to say have no row."""
        job, logs = self.store.get(job_id), self.store.rank_logs(job_id)
        return pb.JobLogs(job_id=job_id, ranks=[pb.RankLog(
            rank=w.rank, worker_id=w.worker_id, received=job.state == pb.SUCCEEDED or w.rank in logs, text=logs.get(w.rank, ""))
            for w in sorted(job.workers, key=lambda w: w.rank)])

    def check_verdicts(self, job_id: str) -> dict[str, pb.WorkerHealth]:
        """A finished check job's verdicts as recorded (worker id -> health); {} when none were."""
        return self.control.health.job_verdicts(job_id)

    def list_workers(self, states: Iterable[int] = (), limit: int = 0, page_token: str = "") -> WorkerPage:
        """A page of workers in (host, device index, id) order; `next_page_token` continues it."""
        health = self.control.health
        conns, token = self.workers.page(states, limit, page_token, self.listed_state)
        infos: list[pb.WorkerInfo] = []

        def sizes():
            for conn in conns:
                infos.append(info := conn.info())
                info.state = self.listed_state(conn)
                info.health.CopyFrom(health.shown(conn.worker_id))
                yield info.ByteSize()
        keep = paging.fitting(sizes())
        if keep < len(conns):
            return WorkerPage(infos[:keep], encode_token(conns[keep - 1].sort_key))
        return WorkerPage(infos, token)

    def queued_jobs(self) -> list[pb.Job]:
        """Jobs waiting for workers, from memory (no store read): for metrics and the dashboard."""
        return [q.job for q in self.book.queued.values()]

    def add_listener(self, fn: Listener) -> None:
        """Call `fn(event, job)` for every job event as it happens, on the coordinator's loop; it
        must not block. Metrics and live views use it."""
        self.events.add_listener(fn)

    # ---- workers ---------------------------------------------------------------------------

    def register(self, reg: wpb.Register) -> WorkerConn:
        admission.check_registration(reg)
        if self.stopping:
            raise Overloaded("the coordinator is stopping: register with the next one", retry_after_s=1.0)
        return self._soon(Register(reg)).conn

    def disconnect(self, conn: WorkerConn, why: str) -> None:
        self._soon(Disconnect(conn, why))

    def on_message(self, conn: WorkerConn, msg: wpb.WorkerMessage) -> None:
        self._soon(WorkerMsg(conn, msg))

    def on_alive(self, conns: list[WorkerConn]) -> None:
        """A worker relay's batch of unchanged heartbeats (coordinator/core/inputs.py's Alive)."""
        self._soon(Alive(conns))

    def listed_state(self, conn: WorkerConn) -> int:
        """QUARANTINED for an idle worker its health record keeps out of user jobs."""
        if conn.state == pb.IDLE and self.control.health.quarantined(conn.worker_id):
            return pb.QUARANTINED
        return conn.state

    def cordon(self, worker_id: str, on: bool, force: bool = False, approve_return: bool = False) -> pb.WorkerInfo:
        """Keep user jobs off a worker (on), or let them back (off; one whose latest verdict
        failed is rechecked first, unless `force`; `approve_return`: a repeat offender that passed),
        by id (also one that is not connected now). A job whose placement.worker_ids names it still runs there."""
        self._soon(Cordon(worker_id, on, force, approve_return))
        return self.fleet.info(worker_id)
