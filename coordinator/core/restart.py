"""After a coordinator restart: the jobs that were running wait for their members to come back
and re-attach (each daemon's Register names the job and rank it runs, or last ran: worker/link.py
keeps its Done). A job whose members are not all back by the grace's end is requeued then
(liveness.py's Requeue).

A member that comes back without the job either lost its run (its daemon restarted) or never had
one: a new group's ranks after 0 are assigned only once rank 0 has bound its store, and a
coordinator killed in between never sent them. Rank 0 tells which (Register.forming_store_port:
its group is still forming, no op has run): then the member is assigned now, to that store, and the
job runs on as it was placed. Otherwise the job cannot finish as it ran, and it is requeued at once
(waiting out the grace only holds its other members). A member back before rank 0 waits for it."""

from __future__ import annotations

import logging

from coordinator.core.inputs import Reload, Requeue
from coordinator.core.registry import WorkerConn
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

log = logging.getLogger("ringleader.coordinator")


class Reattach:
    """The jobs waiting for their members after a restart. `core` is the Control (control.py)
    that holds it: the job book, the registry, the warm groups, and the changes it makes to
    them (a worker's state, an assignment, the queue)."""

    def __init__(self, core) -> None:
        self.core = core
        self.awaiting: dict[str, str] = {}  # worker -> the job it is to re-attach to

    def reload(self, inp: Reload) -> None:
        for q in self.core.book.load(inp.reattach_deadline):
            self.core._enqueue(q)
        self.awaiting = {w: rj.id for rj in self.core.book.running.values() if rj.reattach_deadline for w in rj.members}

    def reattach(self, conn: WorkerConn, job_id: str, rank: int, key: str, forming: bool = False,
                  forming_port: int = 0) -> None:
        self.core._set_state(conn, pb.BUSY, job_id, rank)
        rj = self.core.book.running.get(job_id)
        if rj and rank < len(rj.members) and rj.members[rank] == conn.worker_id:
            self.attached(rj, rank)
            if key and not rj.group_key:  # the group a job ran on when the coordinator restarted
                rj.group_key = key
                self.core.groups.adopt(key, tuple(rj.members), rj.valid.flavor)
            if rank == 0 and rj.reattach_deadline:
                rj.rank0_forming, rj.store_port = forming, forming_port if forming else 0
                self.settle_held(rj)
            return
        # A job this coordinator no longer runs: the worker must drop it.
        self.core._send(conn, wpb.CoordinatorMessage(abort=wpb.Abort(job_id=job_id, reason="job is not running")))

    def attached(self, rj, rank: int) -> None:
        rj.attached.add(rank)
        rj.assigned.add(rank)
        if len(rj.attached) == len(rj.members):
            rj.reattach_deadline = 0.0
            rj.last_progress = self.core.clock.mono

    def came_back(self, conn: WorkerConn, named: str) -> None:
        """At each registration: a member of a job waiting to be re-attached that did not name it."""
        job_id = self.awaiting.pop(conn.worker_id, None)
        rj = self.core.book.running.get(job_id) if job_id and job_id != named else None
        if rj is None or not rj.reattach_deadline:
            return
        rank = rj.members.index(conn.worker_id)
        rj.held.add(rank)
        if rank:
            # Rank 0 says whether the group formed: kept for the job meanwhile (no other job is
            # placed on it); the grace bounds the wait.
            self.core._set_state(conn, pb.BUSY, rj.id, rank)
            if 0 not in rj.attached:
                log.info("worker %s came back without job %s (rank %d): waiting for rank 0", conn.worker_id, rj.id, rank)
                return
        self.settle_held(rj)

    def settle_held(self, rj) -> None:
        """Rank 0 is back (or reported its store): the members that came back without the job are
        assigned to its forming group's store; they wait while rank 0 still binds it; and the job is
        requeued when the group formed, or rank 0 itself lost the job."""
        back = [r for r in sorted(rj.held) if (c := self.core.workers.get(rj.members[r])) and c.connected]
        if not back:
            rj.held.clear()
            return
        if 0 not in back and rj.rank0_forming and not rj.store_port:
            return  # its StoreReady follows (dispatch.py)
        if rj.store_port and 0 not in back:
            rj.held.clear()
            for rank in back:
                conn = self.core.workers.get(rj.members[rank])
                log.info("worker %s came back without job %s (rank %d), which its group never reached: "
                         "assigned now", conn.worker_id, rj.id, rank)
                self.attached(rj, rank)  # BUSY for it since it came back
                self.core.protocol.assign(rj, rank)
            return
        rank = back[0]
        worker = rj.members[rank]
        log.info("worker %s came back without job %s (rank %d): requeued now", worker, rj.id, rank)
        self.requeue(Requeue(rj.id, f"interrupted by a coordinator restart; rank {rank} (worker "
                                     f"{worker}) came back without it"))

    def requeue(self, inp: Requeue) -> None:
        if (rj := self.core.book.running.get(inp.job_id)) is None:
            return
        for rank in rj.attached:
            c = self.core.workers.get(rj.members[rank])
            if c and c.job_id == rj.id:
                self.core._send(c, wpb.CoordinatorMessage(abort=wpb.Abort(job_id=rj.id, reason="requeued")))
        for rank in rj.held - rj.attached:  # kept for it, never ran it
            c = self.core.workers.get(rj.members[rank])
            if c and c.connected and c.job_id == rj.id:
                self.core._free(c)
        rj.held.clear()
        for w in rj.members:
            self.awaiting.pop(w, None)
        self.core._enqueue(self.core.book.requeue(rj, f"requeued: {inp.why}"))
        self.core.protocol.break_group(rj.group_key, "requeued")
