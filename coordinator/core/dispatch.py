"""The worker protocol: the half of the control core (coordinator/core/control.py's `Control`) that
answers what the daemons report, ends jobs, and keeps the warm groups.

Down each worker's stream, in order: Registered, then DropGroup, Assignment and Abort messages.
A new group forms in two steps so no port is probed and bound later: rank 0 is assigned first
with store_port 0, binds its TCP store on a free port and reports it (StoreReady); then the other
ranks are assigned with that port. A job on a warm group is assigned to every rank at once.

Up: heartbeats (op counters, executor health), progress, results, StoreReady, JobDone and
GroupDropped. A report about a job is accepted only from a member of that job, as the rank it
was given; anything else is dropped and counted in `rejected`, and frees nobody: a member that
reports as another rank fails its job, named. Result rows must also be the job's own
(admission.result_refusal): a streamed row that is not is dropped and counted; a final set that
holds one fails the job, naming the rank. A row is stored once, as it arrives (`_store_row`);
rank 0's final set only fills in rows that never streamed in.
"""

from __future__ import annotations

import collections
import logging

from coordinator.core import admission
from ringleader import checks, kinds

from coordinator.health import assemble, baselines, link_baselines
from coordinator.health.trends import trend_point
from coordinator.core.inputs import Alive, WorkerMsg
from coordinator.core.jobs import Running, row_key
from coordinator.core.liveness import UNWELL
from coordinator.core.registry import WorkerConn
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


def who(rj: Running, rank: int) -> str:
    return f"rank {rank} (worker {rj.members[rank]})"


def name_ranks(outcome, members: list[str]) -> None:
    """A check's per-rank figures get their workers' ids from the job's members, by rank: the
    coordinator placed the ranks, so it says who each is (never what a rank wrote there)."""
    field = outcome.DESCRIPTOR.fields_by_name.get("workers")
    if field is None or field.message_type is None or "worker_id" not in field.message_type.fields_by_name:
        return
    for w in outcome.workers:
        w.worker_id = members[w.rank] if w.rank < len(members) else ""


class WorkerProtocol:
    """What the daemons report, how jobs end, the warm groups' bookkeeping, for `core`: the
    Control (control.py) that holds it, whose job book, registry, warm groups and health it
    changes, and whose worker states and sends it goes through."""

    def __init__(self, core) -> None:
        self.core = core
        self.rejected: collections.Counter[str] = collections.Counter()  # worker reports dropped, by kind

    # ---- messages up a worker's stream -----------------------------------------------------

    def message(self, inp: WorkerMsg) -> None:
        conn, msg = inp.conn, inp.msg
        kind = msg.WhichOneof("msg")
        conn.last_heartbeat, conn.last_heartbeat_wall = self.core.clock.mono, self.core.clock.wall
        if kind == "heartbeat":
            self._on_heartbeat(conn, msg.heartbeat)
        elif kind == "group_dropped":
            if conn.holds == msg.group_dropped.group_key:
                self.holds(conn, "")
        elif kind == "done":
            self._on_done(conn, msg.done)
        elif (rj := self._member_job(conn, kind, getattr(msg, kind).job_id)) is not None:
            if kind == "progress":
                rj.last_progress, rj.formed = self.core.clock.mono, True
                if conn.rank == 0:
                    rj.job.progress.CopyFrom(msg.progress.progress)
                    self.core.events.publish(pb.JobEvent(job_id=rj.id, progress=msg.progress.progress), rj.job)
            elif kind == "result" and conn.rank == 0:
                if admission.result_refusal(rj.valid, msg.result.result):
                    self.rejected[kind] += 1
                    return
                rj.formed = True
                self._store_row(rj, msg.result.result)
            elif kind == "store_ready" and conn.rank == 0 and not rj.store_port:
                rj.store_port = msg.store_ready.store_port
                if rj.reattach_deadline:  # after a restart: only members back without it (restart.py)
                    self.core.reattach.settle_held(rj)
                    return
                for rank in range(1, len(rj.members)):
                    if rank not in rj.assigned:
                        self.assign(rj, rank)

    def alive(self, inp: Alive) -> None:
        mono, wall, gone = self.core.clock.mono, self.core.clock.wall, pb.DISCONNECTED
        # A stream that ended meanwhile is DISCONNECTED, for good; one that is not is its worker's
        # connection (the registry holds one connected per worker). 50,000 of these a second at
        # 50,000 workers: no more than that is looked at.
        for conn in inp.conns:
            if conn.state != gone:
                conn.last_heartbeat, conn.last_heartbeat_wall = mono, wall

    def _member_job(self, conn: WorkerConn, kind: str, job_id: str) -> Running | None:
        """The running job a report is about, if `conn` is its member at the rank it was given."""
        rj = self.core.book.running.get(job_id)
        if rj and conn.job_id == job_id and rj.members[conn.rank] == conn.worker_id:
            return rj
        self.rejected[kind] += 1
        return None

    def _on_heartbeat(self, conn: WorkerConn, hb: wpb.Heartbeat) -> None:
        health = hb.executor or pb.EXECUTOR_OK
        if health != conn.executor_health:  # listed at once; a GPU's heartbeat carries telemetry each time
            self.core.workers.touch(conn)
        if health in UNWELL and conn.executor_health not in UNWELL:
            conn.unwell_since = self.core.clock.mono
        elif health not in UNWELL:
            conn.unwell_since = 0.0
        conn.executor_health, conn.executor_detail = health, clip(hb.executor_detail)
        self.core.workers.mark_unwell(conn, health in UNWELL)
        conn.op_seq = hb.op_seq
        if hb.HasField("telemetry"):
            conn.gpu_pids = tuple(hb.telemetry.own_pids)
            self.core.health_inputs.telemetry(conn, hb.telemetry)  # coordinator/core/health_inputs.py
        rj = self.core.book.running.get(hb.job_id)
        if rj and conn.job_id == rj.id and rj.seqs.get(conn.rank) != hb.op_seq:
            rj.seqs[conn.rank] = hb.op_seq
            rj.last_progress = self.core.clock.mono
            # The counter is the executor's own (a new executor starts again from 0): an op
            # beyond the lowest value seen since the job started means this rank is past its
            # group's init, and a group's init ends on every rank together.
            base = rj.op_base.get(conn.rank, hb.op_seq)
            rj.op_base[conn.rank] = min(base, hb.op_seq)
            rj.formed = rj.formed or hb.op_seq > base

    def _on_done(self, conn: WorkerConn, done: wpb.JobDone) -> None:
        rj = self.core.book.running.get(done.job_id)
        conn.executor_restarts = done.executor_restarts
        self.holds(conn, done.warm_group)
        if conn.job_id != done.job_id or conn.rank != done.rank:
            self.rejected["done"] += 1  # not its job, or not its rank: nobody is freed by it
            if rj is not None and conn.job_id == rj.id and rj.members[conn.rank] == conn.worker_id:
                self.end(rj, pb.FAILED, f"{who(rj, conn.rank)} sent a report as rank {done.rank}")
            return
        self._keep_log(conn, done)  # first: a rank whose end fails the job has its log stored by then
        if rj is None or rj.members[done.rank] != conn.worker_id:
            self.core._free(conn)
            return
        if not (done.ok and checks.is_check(rj.job.spec)):
            self.core._free(conn)  # a check holds its gang until its verdicts exist (`end` frees it)
        failed = f"{who(rj, done.rank)} failed: {clip(done.error, MAX_ERROR)}"
        if done.ok:
            self._rank_finished(rj, done)
        elif done.failure == wpb.PEER_ERROR:
            # Probably a victim of another rank's death: give the cause a moment to report.
            rj.peer_errors.append(failed)
            rj.blame_deadline = rj.blame_deadline or self.core.clock.mono + self.core.timings.blame_grace_s
        else:
            self.core.health_inputs.crashed(rj, done.rank, done.failure, clip(done.error))  # its own report: evidence on its worker
            self.end(rj, pb.FAILED, failed)

    def _keep_log(self, conn: WorkerConn, done: wpb.JobDone) -> None:
        """Store the rank's log if `conn` ran that rank, also after the job ended: the ranks
        aborted because another one failed report late, and their logs matter as much."""
        try:
            members = self.core.book.members(done.job_id)
        except NotFound:  # a job this coordinator never had (a worker's leftover from another)
            return
        if not (done.rank < len(members) and members[done.rank] == conn.worker_id):
            self.rejected["log"] += 1
            return
        rj = self.core.book.running.get(done.job_id)
        if rj is not None and done.ok and not done.log:
            # Most ranks that finish print nothing: a row for each was a statement per rank of
            # every job. Stored only if the job ends otherwise (`end`); a SUCCEEDED job's ranks
            # all reported (facade.job_logs).
            rj.quiet_ranks.add(done.rank)
            return
        # The worker caps its log; this cap keeps a wayward one from filling the store.
        self.core.store.set_rank_log(done.job_id, done.rank, log_tail(done.log.encode(), limit=2 * LOG_TAIL_BYTES))

    def _rank_finished(self, rj: Running, done: wpb.JobDone) -> None:
        bad = next(filter(None, (admission.result_refusal(rj.valid, r) for r in done.results)), "")
        if bad:
            self.rejected["done"] += 1
            self.end(rj, pb.FAILED, f"{who(rj, done.rank)} reported a result that is not this job's: {bad}")
            return
        rj.formed = True
        if done.rank == 0:
            for r in done.results:  # the rows that streamed in stay as they are
                if row_key(r) not in rj.rows:
                    self._store_row(rj, r)
        outcome = done.WhichOneof("outcome")
        kind = rj.job.spec.WhichOneof("kind")
        if kind in checks.KINDS:  # every rank's own evidence; rank 0's word on the others is not read
            if (ev := assemble.evidence_of(done)) is not None:
                rj.evidence[done.rank] = ev
        elif done.rank == 0 and outcome:  # stored with the job when it reaches SUCCEEDED
            kept = getattr(rj.job, outcome)
            kept.CopyFrom(getattr(done, outcome))
            name_ranks(kept, rj.members)
        if done.rank == 0 and done.HasField("stragglers"):
            rj.job.stragglers.CopyFrom(done.stragglers)
        rj.finished_ranks.add(done.rank)
        rj.attached.add(done.rank)  # a rank that finished while we restarted is accounted for
        if len(rj.finished_ranks) == len(rj.members):
            if kind in checks.KINDS:
                self._assemble(rj, kind)
            rj.job.progress.done = rj.job.progress.total
            self.core.groups.succeeded(rj.group_key)
            self.end(rj, pb.SUCCEEDED, "; ".join(["all ranks finished", *rj.regressions]))

    def _assemble(self, rj: Running, kind: str) -> None:
        """The check's result, from every rank's own evidence and each worker's registration."""
        models = [c.reg.device.name if (c := self.core.workers.get(w)) else "" for w in rj.members]
        kept = getattr(rj.job, kind)
        build = kinds.get(kind).resolve("assemble")  # the kind table's column
        kept.CopyFrom(build(rj.job.spec, list(rj.job.workers), models, rj.evidence))
        name_ranks(kept, rj.members)
        if kind == "link_matrix":  # each link against its own baseline, not only its peers of this check
            for regression in link_baselines.record(self.core.store, kept, list(rj.job.workers), models, self.core.clock.wall):
                log.warning("job %s: regression: %s", rj.id, regression.describe())
                rj.regressions.append(f"regression: {regression.describe()}")

    def _store_row(self, rj: Running, row: pb.SizeResult) -> None:
        """Store one of the job's result rows, once (a repeat of a stored row is dropped)."""
        key = row_key(row)
        if key in rj.rows:
            return
        rj.rows.add(key)
        # The row gets its baseline and ratio, then feeds that baseline (coordinator/health/baselines.py).
        # The gang's part of the key is the same for every row of the job: found once.
        if rj.baseline_fields is None:
            model_of = {w: c.reg.device.name for w in rj.members if (c := self.core.workers.get(w))}
            rj.baseline_fields = baselines.key_fields(rj.job, model_of)
        if regression := baselines.record(self.core.store, row, rj.baseline_fields, self.core.clock.wall):
            log.warning("job %s: regression: %s", rj.id, regression.describe())
            rj.regressions.append(f"regression: {regression.describe()}")
        if point := trend_point(rj.job, row, rj.baseline_fields, self.core.clock.wall):  # the dashboard's trends
            self.core.store.add_trend(point)
        self.core.store.add_result(rj.id, row)
        self.core.events.record(pb.JobEvent(job_id=rj.id, result=row), rj.job)

    # ---- assigning and ending --------------------------------------------------------------

    def assign(self, rj: Running, rank: int) -> None:
        c = self.core.workers.get(rj.members[rank])
        rank0 = self.core.workers.get(rj.members[0])
        self.core._send(c, wpb.CoordinatorMessage(assignment=wpb.Assignment(
            job_id=rj.id, rank=rank, world_size=len(rj.members), backend=rj.job.backend,
            store_host=rank0.reg.address, store_port=rj.store_port, group_key=rj.group_key,
            spec=rj.job.spec, flavor=rj.valid.flavor)))
        rj.assigned.add(rank)

    def end(self, rj: Running, state: int, reason: str) -> None:
        """Finish a running job; members still in it are told to abort (they report when idle).
        A check's verdicts are applied here, before the ranks it held are freed."""
        self.core.book.finish(rj.id, state, reason)
        if state != pb.SUCCEEDED:
            for rank in rj.quiet_ranks:  # they reported, with nothing to say (`_keep_log`)
                self.core.store.set_rank_log(rj.id, rank, "")
        if checks.is_check(rj.job.spec):
            self.core.health_inputs.verdicts(rj)
        for rank, wid in enumerate(rj.members):
            c = self.core.workers.get(wid)
            if not c or c.job_id != rj.id:
                continue
            if rank in rj.finished_ranks:
                if c.state == pb.BUSY:
                    self.core._free(c)  # a check's rank, held since it finished
                continue
            if rank in rj.assigned:
                self.core._send(c, wpb.CoordinatorMessage(abort=wpb.Abort(job_id=rj.id, reason=reason)))
            else:
                self.core._free(c)  # reserved, but never told of the job
        if state != pb.SUCCEEDED:
            self.break_group(rj.group_key, f"job {rj.id} {pb.JobState.Name(state).lower()}")
        if rj.id in self.core.health_inputs.preflight_of:
            self.core.health_inputs.preflight_checked(rj)  # the job it certifies goes on, in this input

    # ---- warm groups -----------------------------------------------------------------------

    def break_group(self, key: str, why: str) -> None:
        for wid in self.core.groups.break_(key, why):
            self._drop(wid, key, why)
        self.core._dirty = True

    def _drop(self, worker_id: str, key: str, why: str) -> None:
        c = self.core.workers.get(worker_id)
        if c and c.connected:
            self.core._send(c, wpb.CoordinatorMessage(drop_group=wpb.DropGroup(group_key=key, reason=why)))

    def holds(self, conn: WorkerConn, key: str) -> None:
        """The worker's executor now holds `key` ("" for none), as it reported."""
        drop, others = self.core.groups.held(conn.worker_id, conn.holds, key)
        old, conn.holds = conn.holds, key
        if drop:
            self._drop(conn.worker_id, key, "not a warm group of this coordinator")
        for wid in others:
            self._drop(wid, old, f"{conn.worker_id} no longer holds it")
        self.core._dirty = True  # the warm groups a job may reuse changed
