"""The coordinator's domain logic: jobs, their lifecycle, gang placement and failure handling.

Servicers (gRPC, REST) call these methods; everything here runs on one asyncio loop, so no
locks. State of record is the JobStore; unfinished jobs are also held in memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Iterable

from coordinator import admission, scheduler
from coordinator.api import JobStore
from coordinator.registry import WorkerConn, WorkerRegistry
from ringleader import jobspec
from ringleader import spec as specs
from ringleader.errors import FailedPrecondition, InvalidSpec
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

log = logging.getLogger("ringleader.coordinator")

TERMINAL = (pb.SUCCEEDED, pb.FAILED, pb.CANCELLED)


@dataclass
class Timings:
    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 5.0  # a silent worker is declared lost after this
    reconcile_grace_s: float = 15.0  # after a restart, how long RUNNING jobs wait for their workers
    blame_grace_s: float = 3.0  # after a rank's communication error, how long to wait for the cause
    tick_s: float = 0.5


@dataclass
class RunningJob:
    job: pb.Job
    members: list[str]  # worker ids in rank order
    finished_ranks: set[int] = field(default_factory=set)
    attached: set[int] = field(default_factory=set)  # ranks whose worker is connected to it
    last_progress: float = field(default_factory=time.monotonic)
    seqs: dict[int, int] = field(default_factory=dict)
    reattach_deadline: float = 0.0  # > 0 while waiting for workers after a coordinator restart
    peer_errors: list[str] = field(default_factory=list)  # victims' reports, kept until the cause shows
    blame_deadline: float = 0.0


class Coordinator:
    def __init__(self, store: JobStore, timings: Timings | None = None) -> None:
        self.store = store
        self.timings = timings or Timings()
        self.workers = WorkerRegistry()
        self._queued: dict[str, pb.Job] = {}
        self._running: dict[str, RunningJob] = {}
        self._watchers: dict[str, set[asyncio.Queue]] = {}
        self._listeners: list[Callable[[pb.JobEvent, pb.Job], None]] = []
        self._next_seq: dict[str, int] = {}
        self._ticker: asyncio.Task | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Reload unfinished jobs; RUNNING ones wait a grace period for their workers to return."""
        deadline = time.monotonic() + self.timings.reconcile_grace_s
        for job in self.store.unfinished():
            if job.state == pb.QUEUED:
                self._queued[job.id] = job
            else:
                members = [w.worker_id for w in sorted(job.workers, key=lambda w: w.rank)]
                self._running[job.id] = RunningJob(job, members, reattach_deadline=deadline)
        self._ticker = asyncio.create_task(self._tick_forever())

    async def stop(self) -> None:
        if self._ticker:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        for queues in self._watchers.values():
            for q in queues:
                q.put_nowait(None)

    # ---- users -----------------------------------------------------------------------------

    def submit(self, spec: pb.JobSpec) -> pb.Job:
        spec = jobspec.normalize(spec)
        admission.check(spec, (w.reg for w in self.workers.connected()))
        job = pb.Job(id=uuid.uuid4().hex[:12], spec=spec, state=pb.QUEUED,
                     reason="waiting for workers", created_at=time.time())
        self.store.create(job)
        self._record_state(job)
        self._queued[job.id] = job
        self._schedule()
        return self.get(job.id)

    def get(self, job_id: str) -> pb.Job:
        job = self.store.get(job_id)
        live = self._running.get(job_id)
        if live:
            job.progress.CopyFrom(live.job.progress)
        return job

    def list(self, states: Iterable[int] = (), op: str = "", limit: int = 50, before_id: str = "") -> list[pb.Job]:
        return self.store.list(states=states, op=op, limit=limit, before_id=before_id)

    def list_workers(self) -> list[pb.WorkerInfo]:
        return [w.info() for w in self.workers.all()]

    def queued_jobs(self) -> list[pb.Job]:
        """Jobs waiting for workers, in memory (no store read): for metrics and the dashboard."""
        return list(self._queued.values())

    def running_jobs(self) -> list[pb.Job]:
        return [rj.job for rj in self._running.values()]

    def add_listener(self, fn: Callable[[pb.JobEvent, pb.Job], None]) -> None:
        """Call `fn(event, job)` for every job event (state change, progress, result) as it
        happens, on the coordinator's loop; it must not block. Metrics and live views use it."""
        self._listeners.append(fn)

    def cancel(self, job_id: str, reason: str = "") -> pb.Job:
        reason = reason or "cancelled by user"
        if job_id in self._queued:
            self._finish(self._queued.pop(job_id), pb.CANCELLED, reason)
        elif job_id in self._running:
            self._end_running(self._running[job_id], pb.CANCELLED, reason)
        else:
            job = self.store.get(job_id)  # NotFound for unknown ids
            raise FailedPrecondition(f"job {job_id} is already {pb.JobState.Name(job.state)}")
        self._schedule()
        return self.get(job_id)

    async def watch(self, job_id: str) -> AsyncIterator[pb.JobEvent]:
        """Stored events, then live ones, until the job reaches a terminal state."""
        queue: asyncio.Queue = asyncio.Queue()
        self._watchers.setdefault(job_id, set()).add(queue)
        try:
            self.store.get(job_id)
            last = -1
            for event in self.store.events(job_id):
                last = event.seq
                yield event
                if _is_terminal(event):
                    return
            while True:
                event = await queue.get()
                if event is None:
                    return
                if event.seq and event.seq <= last:
                    continue
                yield event
                if _is_terminal(event):
                    return
        finally:
            self._watchers[job_id].discard(queue)

    # ---- workers ---------------------------------------------------------------------------

    def register(self, reg: wpb.Register) -> WorkerConn:
        if not reg.worker_id:
            raise InvalidSpec("register.worker_id", "must not be empty")
        conn = self.workers.add(reg)
        log.info("worker %s registered (%s %s on %s)", reg.worker_id, reg.device.type,
                 reg.device.name, reg.host)
        conn.send(wpb.CoordinatorMessage(registered=wpb.Registered(
            worker_id=reg.worker_id, heartbeat_interval_s=self.timings.heartbeat_interval_s)))
        if reg.running_job_id:
            self._reattach(conn, reg.running_job_id, reg.running_rank)
        self._schedule()
        return conn

    def disconnect(self, conn: WorkerConn, why: str) -> None:
        if conn.state == pb.DISCONNECTED or self.workers.get(conn.worker_id) is not conn:
            return
        conn.state = pb.DISCONNECTED
        conn.outbox.put_nowait(None)  # ends the servicer's writer, which closes the stream
        log.log(logging.WARNING if conn.job_id else logging.INFO, "worker %s left: %s", conn.worker_id, why)
        rj = self._running.get(conn.job_id)
        if rj and rj.members[conn.rank] == conn.worker_id and not rj.reattach_deadline:
            self._end_running(rj, pb.FAILED, f"rank {conn.rank} (worker {conn.worker_id}) lost: {why}")
        self._schedule()

    def on_message(self, conn: WorkerConn, msg: wpb.WorkerMessage) -> None:
        kind = msg.WhichOneof("msg")
        conn.last_heartbeat = time.monotonic()
        conn.last_heartbeat_wall = time.time()
        if kind == "heartbeat":
            rj = self._running.get(msg.heartbeat.job_id)
            if rj and conn.job_id == rj.job.id and rj.seqs.get(conn.rank) != msg.heartbeat.op_seq:
                rj.seqs[conn.rank] = msg.heartbeat.op_seq
                rj.last_progress = time.monotonic()
        elif kind == "progress":
            rj = self._running.get(msg.progress.job_id)
            if rj:
                rj.last_progress = time.monotonic()
                if msg.progress.rank == 0:
                    rj.job.progress.CopyFrom(msg.progress.progress)
                    self._publish(pb.JobEvent(job_id=rj.job.id, time=time.time(),
                                              progress=msg.progress.progress), rj.job)
        elif kind == "result":
            rj = self._running.get(msg.result.job_id)
            if rj:
                self.store.add_result(rj.job.id, msg.result.result)
                self._record(pb.JobEvent(job_id=rj.job.id, result=msg.result.result), rj.job)
        elif kind == "done":
            self._on_done(conn, msg.done)

    # ---- internals -------------------------------------------------------------------------

    def _schedule(self) -> None:
        if not self._queued:
            return
        pending = [self._pending(j) for j in self._queued.values()]
        plan = scheduler.plan(pending, [w.view() for w in self.workers.connected()], time.time())
        for decision in plan.decisions:
            self._start(self._queued.pop(decision.job_id), decision)
        for job_id, why in plan.waiting.items():
            job = self._queued[job_id]
            if job.reason != why:
                job.reason = why
                self.store.update(job)
                self._publish(pb.JobEvent(job_id=job.id, time=time.time(),
                                          state=pb.StateChange(state=job.state, reason=why)), job)

    def _pending(self, job: pb.Job) -> scheduler.PendingJob:
        s, p = job.spec, job.spec.placement
        return scheduler.PendingJob(
            job_id=job.id, world_size=s.world_size, priority=s.priority, submitted_at=job.created_at,
            op=jobspec.op_name(s), dtype=s.collective.dtype, reduce_op=s.collective.reduce_op,
            needs_bytes=jobspec.needs_bytes(s),
            host=p.host, gpu_model=p.gpu_model, worker_ids=tuple(p.worker_ids), device_type=p.device_type,
        )

    def _start(self, job: pb.Job, decision: scheduler.Decision) -> None:
        conns = [self.workers.get(w) for w in decision.worker_ids]
        key = decision.warm_group or scheduler.new_group_key(uuid.uuid4().hex[:8], len(conns))
        store_host, store_port = conns[0].reg.address, conns[0].store_port
        del job.workers[:]
        for rank, c in enumerate(conns):
            job.workers.add(worker_id=c.worker_id, rank=rank, host=c.reg.host,
                            device=f"{c.reg.device.type}:{c.reg.device.index}")
        job.backend = decision.backend
        job.warm_start = bool(decision.warm_group)
        job.started_at = time.time()
        job.progress.CopyFrom(pb.Progress(total=jobspec.progress_total(job.spec)))
        rj = RunningJob(job, list(decision.worker_ids), attached=set(range(len(conns))))
        self._running[job.id] = rj
        self._set_state(job, pb.RUNNING, "running on " + ", ".join(decision.worker_ids)
                        + (" (warm group)" if job.warm_start else ""))
        members = [wpb.Member(worker_id=c.worker_id, host=c.reg.address) for c in conns]
        for rank, c in enumerate(conns):
            c.state, c.job_id, c.rank = pb.BUSY, job.id, rank
            c.send(wpb.CoordinatorMessage(assignment=wpb.Assignment(
                job_id=job.id, rank=rank, world_size=len(conns), backend=decision.backend,
                store_host=store_host, store_port=store_port, group_key=key, spec=job.spec,
                members=members)))

    def _on_done(self, conn: WorkerConn, done: wpb.JobDone) -> None:
        if conn.job_id == done.job_id:
            conn.state, conn.job_id = pb.IDLE, ""
        conn.warm_group, conn.store_port = done.warm_group, done.store_port
        conn.executor_restarts = done.executor_restarts
        rj = self._running.get(done.job_id)
        if rj and done.rank < len(rj.members) and rj.members[done.rank] == conn.worker_id:
            failed = f"rank {done.rank} (worker {conn.worker_id}) failed: {done.error}"
            if done.ok:
                self._on_rank_finished(rj, done)
            elif done.failure == wpb.PEER_ERROR:
                # Probably a victim of another rank's death: give the cause a moment to report.
                rj.peer_errors.append(failed)
                rj.blame_deadline = rj.blame_deadline or time.monotonic() + self.timings.blame_grace_s
            else:
                self._end_running(rj, pb.FAILED, failed)
        self._schedule()

    def _on_rank_finished(self, rj: RunningJob, done: wpb.JobDone) -> None:
        if done.rank == 0 and done.results:
            # The complete set from rank 0 replaces rows that streamed in (some may be lost).
            self.store.clear_results(rj.job.id)
            for r in done.results:
                self.store.add_result(rj.job.id, r)
        outcome = done.WhichOneof("outcome")
        if done.rank == 0 and outcome:  # stored with the job when it reaches SUCCEEDED
            getattr(rj.job, outcome).CopyFrom(getattr(done, outcome))
        rj.finished_ranks.add(done.rank)
        rj.attached.add(done.rank)  # a rank that finished while we restarted is accounted for
        if len(rj.finished_ranks) == len(rj.members):
            rj.job.progress.done = rj.job.progress.total
            self._end_running(rj, pb.SUCCEEDED, "all ranks finished")

    def _reattach(self, conn: WorkerConn, job_id: str, rank: int) -> None:
        rj = self._running.get(job_id)
        if rj and rank < len(rj.members) and rj.members[rank] == conn.worker_id:
            conn.state, conn.job_id, conn.rank = pb.BUSY, job_id, rank
            rj.attached.add(rank)
            if len(rj.attached) == len(rj.members):
                rj.reattach_deadline = 0.0
                rj.last_progress = time.monotonic()
            return
        # A job this coordinator no longer runs: the worker must drop it.
        conn.state, conn.job_id, conn.rank = pb.BUSY, job_id, rank
        conn.send(wpb.CoordinatorMessage(abort=wpb.Abort(job_id=job_id, reason="job is not running")))

    def _end_running(self, rj: RunningJob, state: int, reason: str) -> None:
        """Finish a running job; members still in it are told to abort (they report when idle)."""
        self._running.pop(rj.job.id, None)
        for rank, wid in enumerate(rj.members):
            c = self.workers.get(wid)
            if c and c.job_id == rj.job.id and rank not in rj.finished_ranks and c.state == pb.BUSY:
                c.send(wpb.CoordinatorMessage(abort=wpb.Abort(job_id=rj.job.id, reason=reason)))
        self._finish(rj.job, state, reason)

    def _finish(self, job: pb.Job, state: int, reason: str) -> None:
        job.finished_at = time.time()
        self._set_state(job, state, reason)

    def _set_state(self, job: pb.Job, state: int, reason: str) -> None:
        job.state, job.reason = state, reason
        self.store.update(job)
        self._record_state(job)
        log.info("job %s %s: %s", job.id, pb.JobState.Name(state), reason)

    def _record_state(self, job: pb.Job) -> None:
        self._record(pb.JobEvent(job_id=job.id, state=pb.StateChange(state=job.state, reason=job.reason)), job)

    def _record(self, event: pb.JobEvent, job: pb.Job) -> None:
        """Persist an event (state change or result) with the job's next sequence number, then publish."""
        if event.job_id not in self._next_seq:
            events = self.store.events(event.job_id)
            self._next_seq[event.job_id] = (events[-1].seq + 1) if events else 1
        event.seq = self._next_seq[event.job_id]
        self._next_seq[event.job_id] += 1
        event.time = time.time()
        self.store.add_event(event)
        self._publish(event, job)
        if _is_terminal(event):
            self._next_seq.pop(event.job_id, None)

    def _publish(self, event: pb.JobEvent, job: pb.Job) -> None:
        for q in self._watchers.get(event.job_id, ()):
            q.put_nowait(event)
        for fn in self._listeners:
            try:
                fn(event, job)
            except Exception:  # an observer's bug must not break the job's lifecycle
                log.exception("job event listener failed")

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self.timings.tick_s)
            try:
                self._tick()
            except Exception:  # a bug here must not stop failure detection for good
                log.exception("coordinator tick failed")

    def _tick(self) -> None:
        now = time.monotonic()
        for conn in self.workers.connected():
            silent = now - conn.last_heartbeat
            if silent > self.timings.heartbeat_timeout_s:
                self.disconnect(conn, f"no heartbeat for {silent:.1f} s")
        for rj in list(self._running.values()):
            if rj.reattach_deadline:
                if now > rj.reattach_deadline:
                    self._requeue(rj)
                continue
            timeout = rj.job.spec.op_timeout_s or specs.DEFAULT_OP_TIMEOUT_S
            if rj.blame_deadline and now > rj.blame_deadline:
                self._end_running(rj, pb.FAILED, rj.peer_errors[0] + " (a communication error; no rank reported a cause)")
            elif now - rj.last_progress > timeout:
                self._end_running(rj, pb.FAILED, self._stall_reason(rj, now - rj.last_progress))

    def _stall_reason(self, rj: RunningJob, idle_s: float) -> str:
        seqs = {r: rj.seqs.get(r, 0) for r in range(len(rj.members))}
        stuck = min(seqs, key=lambda r: seqs[r])
        others = ", ".join(f"rank {r} at {s}" for r, s in seqs.items() if r != stuck)
        return (f"stalled: no progress for {idle_s:.0f} s; rank {stuck} (worker {rj.members[stuck]}) "
                f"is at op {seqs[stuck]}" + (f", {others}" if others else ""))

    def _requeue(self, rj: RunningJob) -> None:
        """A job interrupted by a coordinator restart whose workers did not all come back."""
        self._running.pop(rj.job.id)
        for rank in rj.attached:
            c = self.workers.get(rj.members[rank])
            if c and c.job_id == rj.job.id:
                c.send(wpb.CoordinatorMessage(abort=wpb.Abort(job_id=rj.job.id, reason="requeued")))
        self.store.clear_results(rj.job.id)
        job = rj.job
        del job.workers[:]
        job.started_at, job.backend, job.warm_start = 0.0, "", False
        job.progress.Clear()
        self._set_state(job, pb.QUEUED, "requeued: interrupted by a coordinator restart")
        self._queued[job.id] = job
        self._schedule()


def _is_terminal(event: pb.JobEvent) -> bool:
    return event.WhichOneof("event") == "state" and event.state.state in TERMINAL
