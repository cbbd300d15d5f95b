"""Failure detection on a fixed tick: silent workers, stalled jobs, blame, requeue after restart.

Rules (README.md, "Failures"):
- a worker silent for `heartbeat_timeout_s` is lost (its running job fails naming it);
- a running job with no progress for its `op_timeout_s` fails, naming the stuck rank: one whose
  executor its daemon reports stopped or unresponsive first, else the rank with the lowest op
  counter; when every rank is at the same op and none is reported unwell, it says so;
- a rank's communication error (a peer vanished) waits `blame_grace_s` for the cause to report;
  if a rank's executor is reported unwell meanwhile, that rank is blamed at once;
- after a coordinator restart a running job waits `reconcile_grace_s` for its workers, else it
  is requeued.
A stalled event loop is not the workers' fault: time the loop itself lost is not counted
against their heartbeats.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from coordinator.jobs import Running
from coordinator.registry import WorkerConn, WorkerRegistry
from ringleader.v1 import jobs_pb2 as pb

UNWELL = {pb.EXECUTOR_STOPPED: "process stopped", pb.EXECUTOR_UNRESPONSIVE: "unresponsive"}


@dataclass
class Timings:
    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 5.0  # a silent worker is declared lost after this
    reconcile_grace_s: float = 15.0  # after a restart, how long RUNNING jobs wait for their workers
    blame_grace_s: float = 3.0  # after a rank's communication error, how long to wait for the cause
    tick_s: float = 0.5
    worker_ttl_s: float = 600.0  # a worker disconnected this long leaves the registry


@dataclass
class Verdicts:
    """What the coordinator does about what the tick found (it owns the workers and jobs)."""

    worker_lost: Callable[[WorkerConn, str], None]
    job_failed: Callable[[Running, str], None]
    requeue: Callable[[Running], None]


class Liveness:
    def __init__(self, timings: Timings, workers: WorkerRegistry, running: dict[str, Running],
                 verdicts: Verdicts) -> None:
        self.timings = timings
        self.workers = workers
        self.running = running
        self.verdicts = verdicts
        self._last_tick = time.monotonic()

    def tick(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        lag = now - self._last_tick - self.timings.tick_s
        self._last_tick = now
        if lag > self.timings.tick_s:  # the loop was held up: nobody could have been heard
            for conn in self.workers.connected():
                conn.last_heartbeat += lag
        for conn in self.workers.connected():
            silent = now - conn.last_heartbeat
            if silent > self.timings.heartbeat_timeout_s:
                self.verdicts.worker_lost(conn, f"no heartbeat for {silent:.1f} s")
        for rj in list(self.running.values()):
            self._check_job(rj, now)

    def _check_job(self, rj: Running, now: float) -> None:
        if rj.reattach_deadline:
            if now > rj.reattach_deadline:
                self.verdicts.requeue(rj)
            return
        unwell = self.unwell_rank(rj)
        if rj.blame_deadline and (now > rj.blame_deadline or unwell is not None):
            cause = self.describe(rj, unwell) + "; " if unwell is not None else ""
            tail = "" if cause else " (a communication error; no rank reported a cause)"
            self.verdicts.job_failed(rj, cause + rj.peer_errors[0] + tail)
        elif now - rj.last_progress > rj.job.spec.op_timeout_s:
            self.verdicts.job_failed(rj, self.stall_reason(rj, now - rj.last_progress))

    def unwell_rank(self, rj: Running) -> int | None:
        for rank, wid in enumerate(rj.members):
            conn = self.workers.get(wid)
            if conn and conn.job_id == rj.id and conn.executor_health in UNWELL:
                return rank
        return None

    def describe(self, rj: Running, rank: int) -> str:
        conn = self.workers.get(rj.members[rank])
        what = (conn.executor_detail or UNWELL.get(conn.executor_health, "unwell")) if conn else "gone"
        return f"rank {rank} (worker {rj.members[rank]}) is not responding ({what})"

    def stall_reason(self, rj: Running, idle_s: float) -> str:
        seqs = {r: rj.seqs.get(r, 0) for r in range(len(rj.members))}
        head = f"stalled: no progress for {idle_s:.0f} s; "
        unwell = self.unwell_rank(rj)
        if unwell is not None:
            return head + self.describe(rj, unwell) + "; " + _ops(seqs)
        if len(set(seqs.values())) == 1 and len(seqs) > 1:
            return head + f"every rank is at op {seqs[0]} and no executor is reported unwell"
        stuck = min(seqs, key=lambda r: seqs[r])
        others = {r: s for r, s in seqs.items() if r != stuck}
        return (head + f"rank {stuck} (worker {rj.members[stuck]}) is at op {seqs[stuck]}"
                + (", " + _ops(others) if others else ""))


def _ops(seqs: dict[int, int]) -> str:
    return ", ".join(f"rank {r} at op {s}" for r, s in seqs.items())
