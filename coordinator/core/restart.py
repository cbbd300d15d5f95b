"""After a coordinator restart: the jobs that were running wait for their members to come back
and re-attach (each daemon's Register names the job and rank it runs, or last ran: worker/link.py
keeps its Done). A job whose members are not all back by the grace's end is requeued then
(liveness.py's Requeue); one with a member that came back without it is requeued at once: that
rank's run is gone (its daemon restarted), so the job cannot finish as it ran, and waiting out the
grace only holds its other members."""

from __future__ import annotations

import logging
import time

from coordinator.core.inputs import Out, Reload, Requeue
from coordinator.core.registry import WorkerConn
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

log = logging.getLogger("ringleader.coordinator")


class Reattaching:
    """Methods of `Control` (control.py), which owns the state they read and change."""

    _out: Out
    awaiting: dict[str, str]

    def _reload(self, inp: Reload) -> None:
        for q in self.book.load(inp.reattach_deadline):
            self._enqueue(q)
        self.awaiting = {w: rj.id for rj in self.book.running.values() if rj.reattach_deadline for w in rj.members}

    def _reattach(self, conn: WorkerConn, job_id: str, rank: int, key: str) -> None:
        self._set_state(conn, pb.BUSY, job_id, rank)
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
        self._send(conn, wpb.CoordinatorMessage(abort=wpb.Abort(job_id=job_id, reason="job is not running")))

    def _came_back(self, conn: WorkerConn, named: str) -> None:
        """At each registration: a member of a job waiting to be re-attached that did not name it."""
        job_id = self.awaiting.pop(conn.worker_id, None)
        rj = self.book.running.get(job_id) if job_id and job_id != named else None
        if rj is None or not rj.reattach_deadline:
            return
        rank = rj.members.index(conn.worker_id)
        log.info("worker %s came back without job %s (rank %d): requeued now", conn.worker_id, rj.id, rank)
        self._requeue(Requeue(rj.id, f"interrupted by a coordinator restart; rank {rank} (worker "
                                     f"{conn.worker_id}) came back without it"))

    def _requeue(self, inp: Requeue) -> None:
        if (rj := self.book.running.get(inp.job_id)) is None:
            return
        for rank in rj.attached:
            c = self.workers.get(rj.members[rank])
            if c and c.job_id == rj.id:
                self._send(c, wpb.CoordinatorMessage(abort=wpb.Abort(job_id=rj.id, reason="requeued")))
        for w in rj.members:
            self.awaiting.pop(w, None)
        self._enqueue(self.book.requeue(rj, f"requeued: {inp.why}"))
        self.break_group(rj.group_key, "requeued")
