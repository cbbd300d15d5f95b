"""The worker protocol: placing jobs on gangs, and what the daemons report back.

Down each worker's stream, in order: Registered, then DropGroup, Assignment and Abort messages.
A new group forms in two steps so no port is probed and bound later: rank 0 is assigned first
with store_port 0, binds its TCP store on a free port and reports it (StoreReady); then the other
ranks are assigned with that port. A job on a warm group is assigned to every rank at once.

Up: heartbeats (op counters, executor health), progress, results, StoreReady, JobDone and
GroupDropped. A report about a job is accepted only from a member of that job, as the rank it
was given; anything else is dropped and counted in `rejected`. Result rows must also be the job's
own (admission.result_refusal): a streamed row that is not is dropped and counted; a final set
that holds one fails the job, naming the rank.
"""

from __future__ import annotations

import collections
import logging
import time
import uuid

from coordinator import admission, scheduler
from coordinator import groups as warm_groups
from coordinator.groups import Groups
from coordinator.jobs import JobBook, Queued, Running
from coordinator.liveness import Timings
from coordinator.registry import WorkerConn, WorkerRegistry
from ringleader.defaults import LOG_TAIL_BYTES, log_tail
from ringleader.errors import NotFound
from ringleader.jobspec import MAX_TEXT
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

log = logging.getLogger("ringleader.coordinator")


MAX_ERROR = 1024  # a rank's failure as its job's reason: room for an exception's message


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """Free text a worker sends, as far as it may reach a job's reason or the UI."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Dispatcher:
    def __init__(self, book: JobBook, workers: WorkerRegistry, groups: Groups, timings: Timings) -> None:
        self.book = book
        self.workers = workers
        self.groups = groups
        self.timings = timings
        self.rejected: collections.Counter[str] = collections.Counter()  # worker reports dropped, by kind
        # The scheduler's indexes follow the queue and the fleet as they change, so a pass
        # rescans neither (coordinator/scheduler.py).
        self.scheduler = scheduler.Scheduler()
        book.on_queued = self._queued
        book.on_dequeued = self.scheduler.remove
        book.waiting_reason = self.scheduler.reason
        workers.on_change = self._worker_changed

    # ---- placement -------------------------------------------------------------------------

    def schedule(self) -> None:
        for decision in self.scheduler.place(self.groups.warm()):
            self._start(decision)

    def _queued(self, q: Queued) -> None:
        self.scheduler.add(scheduler.PendingJob.of(q.job.id, q.valid, q.job.created_at))

    def _worker_changed(self, conn: WorkerConn) -> None:
        if conn.connected:
            self.scheduler.put_worker(conn.view())
        else:
            self.scheduler.drop_worker(conn.worker_id)

    def _start(self, d: scheduler.Decision) -> None:
        conns = [self.workers.get(w) for w in d.worker_ids]
        flavor = self.book.queued[d.job_id].valid.flavor
        # A warm group made with other communicator settings cannot serve: form a new one.
        held = self.groups.get(d.warm_group) if d.warm_group else None
        warm = held is not None and held.flavor == flavor
        key = d.warm_group if warm else warm_groups.new_key(uuid.uuid4().hex[:8], len(conns))
        if not warm:
            # Members leave the groups they held: those break, and every holder drops them, on
            # each worker's ordered stream before this job's assignment.
            for c in conns:
                if c.holds:
                    self.break_group(c.holds, f"{c.worker_id} joined another gang")
            self.groups.form(key, d.worker_ids, flavor)
        refs = [pb.WorkerRef(worker_id=c.worker_id, rank=rank, host=c.reg.host,
                             device=f"{c.reg.device.type}:{c.reg.device.index}") for rank, c in enumerate(conns)]
        rj = self.book.start(d.job_id, refs, d.backend, key, warm)
        for rank, c in enumerate(conns):
            c.transition(pb.BUSY, rj.id, rank)
        for rank in (range(len(conns)) if warm else [0]):
            self._assign(rj, rank)

    def _assign(self, rj: Running, rank: int) -> None:
        c = self.workers.get(rj.members[rank])
        rank0 = self.workers.get(rj.members[0])
        c.send(wpb.CoordinatorMessage(assignment=wpb.Assignment(
            job_id=rj.id, rank=rank, world_size=len(rj.members), backend=rj.job.backend,
            store_host=rank0.reg.address, store_port=rj.store_port, group_key=rj.group_key,
            spec=rj.job.spec, flavor=rj.valid.flavor)))
        rj.assigned.add(rank)

    # ---- ending ----------------------------------------------------------------------------

    def end(self, rj: Running, state: int, reason: str) -> None:
        """Finish a running job; members still in it are told to abort (they report when idle)."""
        self.book.finish(rj.id, state, reason)
        for rank, wid in enumerate(rj.members):
            c = self.workers.get(wid)
            if not c or c.job_id != rj.id or rank in rj.finished_ranks:
                continue
            if rank in rj.assigned:
                c.send(wpb.CoordinatorMessage(abort=wpb.Abort(job_id=rj.id, reason=reason)))
            else:
                c.transition(pb.IDLE)  # reserved, but never told of the job
        if state != pb.SUCCEEDED:
            self.break_group(rj.group_key, f"job {rj.id} {pb.JobState.Name(state).lower()}")

    def requeue(self, rj: Running) -> None:
        for rank in rj.attached:
            c = self.workers.get(rj.members[rank])
            if c and c.job_id == rj.id:
                c.send(wpb.CoordinatorMessage(abort=wpb.Abort(job_id=rj.id, reason="requeued")))
        self.book.requeue(rj, "requeued: interrupted by a coordinator restart")
        self.break_group(rj.group_key, "requeued")
        self.schedule()

    def fail(self, rj: Running, reason: str) -> None:
        self.end(rj, pb.FAILED, reason)
        self.schedule()

    def break_group(self, key: str, why: str) -> None:
        for wid in self.groups.break_(key, why):
            self._drop(wid, key, why)

    def _drop(self, worker_id: str, key: str, why: str) -> None:
        c = self.workers.get(worker_id)
        if c and c.connected:
            c.send(wpb.CoordinatorMessage(drop_group=wpb.DropGroup(group_key=key, reason=why)))

    def _holds(self, conn: WorkerConn, key: str) -> None:
        """The worker's executor now holds `key` ("" for none), as it reported."""
        drop, others = self.groups.held(conn.worker_id, conn.holds, key)
        old, conn.holds = conn.holds, key
        if drop:
            self._drop(conn.worker_id, key, "not a warm group of this coordinator")
        for wid in others:
            self._drop(wid, old, f"{conn.worker_id} no longer holds it")

    # ---- workers ---------------------------------------------------------------------------

    def register(self, reg: wpb.Register) -> WorkerConn:
        conn = self.workers.add(reg)
        log.info("worker %s registered (%s %s on %s)", reg.worker_id, reg.device.type, reg.device.name, reg.host)
        conn.send(wpb.CoordinatorMessage(registered=wpb.Registered(
            worker_id=reg.worker_id, heartbeat_interval_s=self.timings.heartbeat_interval_s)))
        if reg.running_job_id:
            self._reattach(conn, reg.running_job_id, reg.running_rank, reg.warm_group)
        self._holds(conn, reg.warm_group)
        self.schedule()
        return conn

    def _reattach(self, conn: WorkerConn, job_id: str, rank: int, key: str) -> None:
        conn.transition(pb.BUSY, job_id, rank)
        rj = self.book.running.get(job_id)
        if rj and rank < len(rj.members) and rj.members[rank] == conn.worker_id:
            rj.attached.add(rank)
            rj.assigned.add(rank)
            if key and not rj.group_key:  # the group a job ran on when the coordinator restarted
                rj.group_key = key
                self.groups.adopt(key, tuple(rj.members), rj.valid.flavor)
            if len(rj.attached) == len(rj.members):
                rj.reattach_deadline = 0.0
                rj.last_progress = time.monotonic()
            return
        # A job this coordinator no longer runs: the worker must drop it.
        conn.send(wpb.CoordinatorMessage(abort=wpb.Abort(job_id=job_id, reason="job is not running")))

    def disconnect(self, conn: WorkerConn, why: str) -> None:
        if not conn.connected or self.workers.get(conn.worker_id) is not conn:
            return
        rj = self.book.running.get(conn.job_id)
        rank = conn.rank
        conn.transition(pb.DISCONNECTED)
        conn.outbox.put_nowait(None)  # ends the servicer's writer, which closes the stream
        log.log(logging.WARNING if rj else logging.INFO, "worker %s left: %s", conn.worker_id, why)
        if rj and rj.members[rank] == conn.worker_id and not rj.reattach_deadline:
            self.end(rj, pb.FAILED, f"rank {rank} (worker {conn.worker_id}) lost: {why}")
        self._holds(conn, "")
        self.schedule()

    def on_message(self, conn: WorkerConn, msg: wpb.WorkerMessage) -> None:
        kind = msg.WhichOneof("msg")
        conn.last_heartbeat, conn.last_heartbeat_wall = time.monotonic(), time.time()
        if kind == "heartbeat":
            self._on_heartbeat(conn, msg.heartbeat)
        elif kind == "group_dropped":
            if conn.holds == msg.group_dropped.group_key:
                self._holds(conn, "")
            self.schedule()
        elif kind == "done":
            self._on_done(conn, msg.done)
        elif (rj := self._member_job(conn, kind, getattr(msg, kind).job_id)) is not None:
            if kind == "progress":
                rj.last_progress = time.monotonic()
                if conn.rank == 0:
                    rj.job.progress.CopyFrom(msg.progress.progress)
                    self.book.events.publish(pb.JobEvent(job_id=rj.id, progress=msg.progress.progress), rj.job)
            elif kind == "result" and conn.rank == 0:
                if admission.result_refusal(rj.valid, msg.result.result):
                    self.rejected[kind] += 1
                    return
                self.book.store.add_result(rj.id, msg.result.result)
                self.book.events.record(pb.JobEvent(job_id=rj.id, result=msg.result.result), rj.job)
            elif kind == "store_ready" and conn.rank == 0 and not rj.store_port:
                rj.store_port = msg.store_ready.store_port
                for rank in range(1, len(rj.members)):
                    self._assign(rj, rank)

    def _member_job(self, conn: WorkerConn, kind: str, job_id: str) -> Running | None:
        """The running job a report is about, if `conn` is its member at the rank it was given."""
        rj = self.book.running.get(job_id)
        if rj and conn.job_id == job_id and rj.members[conn.rank] == conn.worker_id:
            return rj
        self.rejected[kind] += 1
        return None

    def _on_heartbeat(self, conn: WorkerConn, hb: wpb.Heartbeat) -> None:
        conn.executor_health, conn.executor_detail = hb.executor or pb.EXECUTOR_OK, clip(hb.executor_detail)
        rj = self.book.running.get(hb.job_id)
        if rj and conn.job_id == rj.id and rj.seqs.get(conn.rank) != hb.op_seq:
            rj.seqs[conn.rank] = hb.op_seq
            rj.last_progress = time.monotonic()

    def _on_done(self, conn: WorkerConn, done: wpb.JobDone) -> None:
        rj = self.book.running.get(done.job_id)
        member = rj is not None and conn.job_id == done.job_id and conn.rank == done.rank \
            and rj.members[done.rank] == conn.worker_id
        if conn.job_id == done.job_id:
            self._keep_log(conn, done)  # first: a rank whose end fails the job has its log stored by then
            conn.transition(pb.IDLE)
        conn.executor_restarts = done.executor_restarts
        self._holds(conn, done.warm_group)
        if member:
            failed = f"rank {done.rank} (worker {conn.worker_id}) failed: {clip(done.error, MAX_ERROR)}"
            if done.ok:
                self._rank_finished(rj, done)
            elif done.failure == wpb.PEER_ERROR:
                # Probably a victim of another rank's death: give the cause a moment to report.
                rj.peer_errors.append(failed)
                rj.blame_deadline = rj.blame_deadline or time.monotonic() + self.timings.blame_grace_s
            else:
                self.end(rj, pb.FAILED, failed)
        self.schedule()

    def _keep_log(self, conn: WorkerConn, done: wpb.JobDone) -> None:
        """Store the rank's log if `conn` ran that rank, also after the job ended: the ranks
        aborted because another one failed report late, and their logs matter as much."""
        store = self.book.store
        rj = self.book.running.get(done.job_id)
        try:
            members = rj.members if rj else [w.worker_id for w in sorted(store.get(done.job_id).workers,
                                                                          key=lambda w: w.rank)]
        except NotFound:  # a job this coordinator never had (a worker's leftover from another)
            return
        if done.rank < len(members) and members[done.rank] == conn.worker_id:
            # The worker caps its log; this cap keeps a wayward one from filling the store.
            store.set_rank_log(done.job_id, done.rank, log_tail(done.log.encode(), limit=2 * LOG_TAIL_BYTES))
        else:
            self.rejected["log"] += 1

    def _rank_finished(self, rj: Running, done: wpb.JobDone) -> None:
        store = self.book.store
        bad = next(filter(None, (admission.result_refusal(rj.valid, r) for r in done.results)), "")
        if bad:
            self.rejected["done"] += 1
            self.end(rj, pb.FAILED, f"rank {done.rank} (worker {rj.members[done.rank]}) reported a result "
                                    f"that is not this job's: {bad}")
            return
        if done.rank == 0 and done.results:
            # The complete set from rank 0 replaces rows that streamed in (some may be lost).
            store.clear_results(rj.id)
            for r in done.results:
                store.add_result(rj.id, r)
        outcome = done.WhichOneof("outcome")
        if done.rank == 0 and outcome:  # stored with the job when it reaches SUCCEEDED
            getattr(rj.job, outcome).CopyFrom(getattr(done, outcome))
        rj.finished_ranks.add(done.rank)
        rj.attached.add(done.rank)  # a rank that finished while we restarted is accounted for
        if len(rj.finished_ranks) == len(rj.members):
            rj.job.progress.done = rj.job.progress.total
            self.groups.succeeded(rj.group_key)
            self.end(rj, pb.SUCCEEDED, "all ranks finished")
