"""The control core as one reactor: every input goes through `Control.handle`, which applies it
and returns what to send.

    out = control.handle(Submit(valid))          # or Cancel, Register, Disconnect, WorkerMsg,
    for conn, msg in out.sends: ...              # Tick, Cordon, Reload (coordinator/core/inputs.py)

`Control` owns the job book (jobs.JobBook), the worker registry (registry.WorkerRegistry), the
warm groups (groups.Groups), the scheduler (scheduler.Scheduler) and the health book
(coordinator/health/book.py: verdicts, cordons, rechecks; the one home of a worker's quarantine).
Nothing called from inside `handle` may call `handle` again: a re-entry raises (it would lose the
outer input's placement pass and events). Each change updates the scheduler's indexes right
beside it (`_enqueue`, `_unqueue`, `_set_state`); nothing installs a callback on another
object. A placement pass (`schedule`) is an input of its own (`Place`), which the caller feeds
after inputs whose `Out.place` says one is due (they changed the queue, the idle set or the warm
groups). A tick asks liveness (a pure
function of the clock, the running jobs and the workers) for its verdicts, which are inputs too
(Lost, Fail, Requeue) and are applied in the same turn; it also cancels queued jobs past their
queue_timeout_s and forgets workers gone longer than the registry's TTL.

Control holds components that own their state, called by name, each given its collaborators:
`protocol` (dispatch.WorkerProtocol: what the daemons report, how jobs end, the warm groups'
bookkeeping), `health_inputs` (health_inputs.HealthInputs: verdicts, cordons, preflight),
`reattach` (restart.Reattach: jobs waiting for their members after a restart) and `check_hold`
(check_hold.CheckHold: checks moved ahead of user jobs). Control itself applies users' calls,
registrations, departures and ticks, keeps each worker's state and the scheduler's indexes, and
places jobs. Store writes happen as the change is applied;
the caller (facade.Coordinator, coordinator/shell/facade.py) awaits their commit before it acknowledges a user.

Hooks for other parts:
- health: a check job's verdicts are applied as it ends, cordons are inputs (`Cordon`); both in
  coordinator/core/health_inputs.py. A quarantined worker gets no job unless the job's
  placement.worker_ids names it (or it is a check);
- result rows: every row is stored through `WorkerProtocol._store_row(rj, row)` (dispatch.py),
  once, as it arrives: the place to annotate a row (baselines) before it is stored.
"""

from __future__ import annotations

import logging
import uuid
from typing import Callable

from coordinator.core import admission, liveness, scheduler
from coordinator.core import groups as warm_groups
from coordinator.store.api import JobStore
from coordinator.core.dispatch import WorkerProtocol
from coordinator.core.health_inputs import HealthInputs
from coordinator.core.queue_heap import QueueHeap
from coordinator.core.clock import Clock, Now
from coordinator.core.reentry import Guard
from coordinator.core.writes import Writes
from coordinator.core.restart import Reattach
from coordinator.core.check_hold import CheckHold
from coordinator.core.events import EventBus
from coordinator.core.groups import Groups
from coordinator.core.inputs import (CLOSE, Alive, Cancel, Cordon, Disconnect, Fail, Input, Lost, Out, Place, Register,
                                     Reload, Requeue, Submit, Tick, WorkerMsg)
from coordinator.core.jobs import JobBook, Page, Queued
from coordinator.core.liveness import Timings
from coordinator.core.registry import WorkerConn, WorkerRegistry
from coordinator.health.expectations import History
from coordinator.health.book import DEFAULT_MAX_SHARE, HealthBook
from ringleader.errors import FailedPrecondition
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

log = logging.getLogger("ringleader.coordinator")


class Control:
    def __init__(self, store: JobStore, timings: Timings | None = None,
                 quarantine_max_share: float = DEFAULT_MAX_SHARE, health_observe: bool = False,
                 new_id: Callable[[], str] = lambda: uuid.uuid4().hex) -> None:
        self.new_id = new_id  # job ids and group keys (a test gives a sequence: the same inputs, the same Outs)
        self.clock = Clock()  # the input's time, given to handle (coordinator/core/clock.py)
        self.store = Writes(store)  # the writes leave in Out.writes (coordinator/core/writes.py)
        self.timings = timings or Timings()
        self.events = EventBus(self.store, self.clock)
        self.book = JobBook(self.store, self.events, self.clock, new_id)
        self.workers = WorkerRegistry(ttl_s=self.timings.worker_ttl_s)
        self.groups = Groups()
        self.health = HealthBook(self.store, clock=lambda: self.clock.wall, max_share=quarantine_max_share, observe=health_observe)
        self.health.changed = self.workers.touch_id  # a new verdict or cordon is listed at once
        self.expectations = History()  # each check key's passing figures (coordinator/health/expectations.py)
        self.scheduler = scheduler.Scheduler(cordoned_ids=self.health.cordoned_ids)  # counted apart when waiting
        self._out = Out()
        self._guard = Guard()  # re-entry is an error (coordinator/core/reentry.py)
        self._dirty = False  # the queue, the idle set or the warm groups changed: place at the end
        self._placement_due = False  # a pass is due: the next `Place` input runs it
        self._last_tick: float | None = None
        # Queued jobs with a queue_timeout_s, by deadline (wall clock against created_at: a restart
        # neither resets nor extends a wait); a tick takes only what is due.
        self._queue_deadlines = QueueHeap(self.book.queued, Queued.deadline)
        self.protocol = WorkerProtocol(self)  # the daemons' reports, jobs' ends, warm groups (dispatch.py)
        self.health_inputs = HealthInputs(self, self.health, self.expectations)  # health_inputs.py
        self.certifying = self.health_inputs.certifying  # read by the edge's read view
        self.reattach = Reattach(self)  # after a restart (coordinator/core/restart.py)
        self.check_hold = CheckHold(self.timings, self.book, self.scheduler, self.workers)
        self._handlers: dict[type, Callable] = {
            Submit: self._submit, Cancel: self._cancel, Register: self._register, Disconnect: self._disconnect,
            Lost: self._disconnect, WorkerMsg: self.protocol.message, Tick: self._tick, Cordon: self.health_inputs.cordon,
            Reload: self.reattach.reload, Fail: self._fail, Requeue: self.reattach.requeue, Place: self._place,
            Alive: self.protocol.alive,
        }

    # ---- the one entry point ---------------------------------------------------------------

    def handle(self, inp: Input, now: Now) -> Out:
        """Apply one input; return the messages to send (in order) and the events it recorded.
        Bad input raises (InvalidSpec, NotFound, FailedPrecondition, AlreadyExists) and changes
        nothing. No input but `Place` runs the placement pass: `Out.place` says one is due (the
        queue, the idle set or the warm groups changed, or the last pass stopped at its ranks),
        and the caller feeds `Place()` when it chooses (the facade: once per turn of its loop,
        for every input of that turn; a test driver: after each input)."""
        with self._guard.entered(type(inp).__name__):
            self.clock.set(now)
            out = self._out = Out()
            self._dirty = False
            self._handlers[type(inp)](inp)
            self._placement_due = self._placement_due or self._dirty
            out.events = self.events.drain()
            out.writes = self.store.drain()
            out.place = self._placement_due
            return out

    def _place(self, inp: Place) -> None:
        """The placement pass the inputs before asked for (none due: nothing)."""
        if self._placement_due:
            self._placement_due = False
            self.schedule()
        self._dirty = False  # what the pass itself changed, it has seen

    def schedule(self) -> None:
        """The placement pass: start the queued jobs that can start now, up to Timings.pass_ranks."""
        for decision in self.scheduler.place(self.groups.warm(), self.timings.pass_ranks):
            self._start(decision)
        self._placement_due = self._placement_due or self.scheduler.cut

    # ---- reading (no input: nothing changes) -----------------------------------------------

    def get(self, job_id: str) -> pb.Job:
        return self._live(self.book.get(job_id))

    def page(self, states=(), op: str = "", limit: int = 0, before_id: str = "", rows=None) -> Page:
        page = self.book.page(states, op, limit, before_id, rows)
        for job in page.jobs:
            self._live(job)
        return page

    def copy_of(self, job: pb.Job) -> pb.Job:
        """`get`'s answer for a job held here that has no results, without the store's read."""
        return self._live(self.book.copy(job))

    def _live(self, job: pb.Job) -> pb.Job:
        """A queued job's waiting reason is worked out when read, never stored on each change."""
        if job.id in self.certifying:
            job.reason = self.certifying[job.id].reason()
        elif job.id in self.book.queued:
            job.reason = self.scheduler.reason(job.id) or job.reason
        return job

    # ---- users -----------------------------------------------------------------------------

    def _submit(self, inp: Submit) -> None:
        admission.check(inp.valid, self.workers.kinds())
        job = self.book.submit(inp.valid, inp.request_id)
        self._enqueue(self.book.queued[job.id])
        self._out.job = job

    def _cancel(self, inp: Cancel) -> None:
        if inp.job_id in self.book.queued:
            self.certifying.pop(inp.job_id, None)  # its running check ends as checks do
            self._unqueue(inp.job_id)
            self._out.job = self.book.queued[inp.job_id].job  # as stored, and without results
            self.book.finish(inp.job_id, pb.CANCELLED, inp.reason)
        elif (rj := self.book.running.get(inp.job_id)) is not None:
            self.protocol.end(rj, pb.CANCELLED, inp.reason)
            self._out.job = None if rj.rows else rj.job  # with rows stored, the caller reads them
        else:
            job = self.store.get(inp.job_id)  # NotFound for unknown ids
            raise FailedPrecondition(f"job {inp.job_id} is already {pb.JobState.Name(job.state)}")

    def _enqueue(self, q: Queued) -> None:
        self.scheduler.add(scheduler.PendingJob.of(q.job.id, q.valid, q.job.created_at))
        self._queue_deadlines.add(q.job.id, q)
        self.check_hold.note(q)
        self._dirty = True

    def _queue_timeouts(self, wall: float) -> None:
        """Cancel the queued jobs whose queue_timeout_s has passed, saying what they waited for."""
        for job_id in list(self._queue_deadlines.due(wall)):
            limit, waiting = self.book.queued[job_id].valid.spec.queue_timeout_s, self.scheduler.reason(job_id)
            self._cancel(Cancel(job_id, f"still queued after its queue timeout of {limit:g} s"
                                        + (f": {waiting}" if waiting else "")))

    def _unqueue(self, job_id: str) -> None:
        self.scheduler.remove(job_id)
        self._dirty = True  # what it reserved is free for the jobs behind it

    # ---- workers and the fleet -------------------------------------------------------------

    def _register(self, inp: Register) -> None:
        reg = inp.reg
        conn = self.workers.add(reg, self.clock.mono, self.clock.wall)
        log.info("worker %s registered (%s %s on %s)", reg.worker_id, reg.device.type, reg.device.name, reg.host)
        self._send(conn, wpb.CoordinatorMessage(registered=wpb.Registered(
            worker_id=reg.worker_id, heartbeat_interval_s=self.timings.heartbeat_interval_s)))
        self._index(conn)
        if reg.running_job_id:
            self.reattach.reattach(conn, reg.running_job_id, reg.running_rank, reg.warm_group, reg.forming, reg.forming_store_port)
        self.reattach.came_back(conn, reg.running_job_id)
        self.protocol.holds(conn, reg.warm_group)
        self._out.conn = conn

    def _disconnect(self, inp: Disconnect | Lost) -> None:
        conn = inp.conn
        if not conn.connected or self.workers.get(conn.worker_id) is not conn:
            return
        rj = self.book.running.get(conn.job_id)
        rank = conn.rank
        self._set_state(conn, pb.DISCONNECTED)
        self._send(conn, CLOSE)  # ends the servicer's writer, which closes the stream
        log.log(logging.WARNING if rj else logging.INFO, "worker %s left: %s", conn.worker_id, inp.why)
        if rj and rj.members[rank] == conn.worker_id and not rj.reattach_deadline:
            self.protocol.end(rj, pb.FAILED, f"rank {rank} (worker {conn.worker_id}) lost: {inp.why}")
        self.protocol.holds(conn, "")

    def _set_state(self, conn: WorkerConn, to: int, job_id: str = "", rank: int = 0) -> None:
        """The one way the control core changes a worker's state: the scheduler follows."""
        conn.transition(to, job_id, rank, self.clock.mono)
        self._index(conn)

    def _free(self, conn: WorkerConn) -> None:
        """The worker is done with its job (or never started it)."""
        self._set_state(conn, pb.IDLE)

    def _index(self, conn: WorkerConn) -> None:
        if conn.connected:
            wid = conn.worker_id
            self.scheduler.put_worker(conn.view(self.health.quarantined(wid), self.health.verdict(wid) == pb.HEALTHY))
        else:
            self.scheduler.drop_worker(conn.worker_id)
        if conn.state != pb.BUSY:
            self._dirty = True

    def _send(self, conn: WorkerConn, msg: wpb.CoordinatorMessage | None) -> None:
        self._out.sends.append((conn, msg))

    # ---- the clock -------------------------------------------------------------------------

    def _tick(self, inp: Tick) -> None:
        now, last = inp.now, self._last_tick
        self._last_tick = now
        lag = now - last - self.timings.tick_s if last is not None else 0.0
        if lag > self.timings.tick_s:  # the loop was held up: nobody could have been heard
            for conn in self.workers.connected():
                conn.last_heartbeat += lag
            for conn in self.workers.unwell.values():  # the only ones with an unwell_since
                conn.unwell_since = conn.unwell_since and conn.unwell_since + lag
        for worker_id in self.workers.expire(now):
            log.info("worker %s forgotten: disconnected for over %.0f s", worker_id, self.workers.ttl_s)
        self._queue_timeouts(inp.wall or self.clock.wall)
        self._dirty |= self.check_hold.hold(inp.wall or self.clock.wall)
        heard = min(now, inp.heard) if inp.heard else now
        for verdict in liveness.verdicts(now, self.book.running.values(), self.workers, self.timings, heard):
            try:
                self._handlers[type(verdict)](verdict)
            except Exception:  # a bug in one verdict must not keep the others (or their sends) back
                log.exception("applying %s failed", verdict)

    def _fail(self, inp: Fail) -> None:
        if (rj := self.book.running.get(inp.job_id)) is not None:
            self.protocol.end(rj, pb.FAILED, inp.reason)

    # ---- placement -------------------------------------------------------------------------

    def _start(self, d: scheduler.Decision) -> None:
        if self.health_inputs.preflight(d):
            return  # its gang is checked first (coordinator/core/preflight.py)
        conns = [self.workers.get(w) for w in d.worker_ids]
        flavor = self.book.queued[d.job_id].valid.flavor
        # A warm group made with other communicator settings cannot serve: form a new one.
        held = self.groups.get(d.warm_group) if d.warm_group else None
        warm = held is not None and held.flavor == flavor
        key = d.warm_group if warm else warm_groups.new_key(self.new_id()[:8], len(conns))
        if not warm:
            # Members leave the groups they held: those break, and every holder drops them, on
            # each worker's ordered stream before this job's assignment.
            for c in conns:
                if c.holds:
                    self.protocol.break_group(c.holds, f"{c.worker_id} joined another gang")
            self.groups.form(key, d.worker_ids, flavor)
        refs = [pb.WorkerRef(worker_id=c.worker_id, rank=rank, host=c.reg.host,
                             device=f"{c.reg.device.type}:{c.reg.device.index}") for rank, c in enumerate(conns)]
        rj = self.book.start(d.job_id, refs, d.backend, key, warm)
        rj.op_base = {rank: c.op_seq for rank, c in enumerate(conns)}  # ops beyond these: the group formed
        for rank, c in enumerate(conns):
            self._set_state(c, pb.BUSY, rj.id, rank)
        for rank in (range(len(conns)) if warm else [0]):
            self.protocol.assign(rj, rank)
