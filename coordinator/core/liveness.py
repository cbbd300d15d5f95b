"""Failure detection: what a clock tick finds, as verdicts (a pure function: it changes nothing).

Rules (README.md, "Failures"):
- a worker silent for `heartbeat_timeout_s` is lost (its running job fails naming it);
- a rank whose executor its daemon reports stopped or unresponsive for `unwell_s` fails its job,
  naming it, whatever the job's op deadline, also while its group is forming;
- a new process group not formed (no rank past its init) within the spec's
  `rendezvous_timeout_s` (default 30 s) fails the job, naming the ranks that have not joined;
- a running job with no progress for its `op_timeout_s` fails, naming the stuck rank: one whose
  executor its daemon reports stopped or unresponsive first, else the rank with the lowest op
  counter; when every rank is at the same op and none is reported unwell, it says so;
- a rank's communication error (a peer vanished) waits `blame_grace_s` for the cause to report;
  if a rank's executor is reported unwell meanwhile, that rank is blamed at once;
- after a coordinator restart a running job waits `reconcile_grace_s` for its workers, else it
  is requeued.
The control core (coordinator/core/control.py) applies the verdicts, and discounts time its own event
loop was stalled from the workers' heartbeats before it asks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from coordinator.core.inputs import Fail, Input, Lost, Requeue
from coordinator.core.jobs import Running
from coordinator.core.registry import WorkerRegistry
from ringleader import jobspec
from ringleader.v1 import jobs_pb2 as pb

UNWELL = {pb.EXECUTOR_STOPPED: "process stopped", pb.EXECUTOR_UNRESPONSIVE: "unresponsive"}


@dataclass
class Timings:
    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 5.0  # a silent worker is declared lost after this
    reconcile_grace_s: float = 15.0  # after a restart, how long RUNNING jobs wait for their workers
    blame_grace_s: float = 3.0  # after a rank's communication error, how long to wait for the cause
    # A rank's executor reported stopped or unresponsive this long fails its job: a stopped rank
    # is named in seconds, not when a collective's own timeout (gloo: 60 s) fires elsewhere.
    unwell_s: float = 4.0
    tick_s: float = 0.5
    worker_ttl_s: float = 600.0  # a worker disconnected this long leaves the registry
    # Load (coordinator/core/load.py): worker messages applied per turn of the loop (0: no bound),
    # and the loop lag past which calls that add work are refused (0: never).
    worker_msgs_per_turn: int = 256
    pass_ranks: int = 128  # ranks one placement pass starts at most (0: no bound); the next goes on
    shed_lag_s: float = 2.0
    stall_warn_s: float = 0.2  # a stall of the loop this long is named in the log (0: never)
    # A check job queued this long holds its workers: they take no new user job until it starts
    # (0: never); at most this share of the connected workers at once (coordinator/core/check_hold.py).
    check_hold_after_s: float = 60.0
    check_hold_share: float = 0.05


def verdicts(now: float, running: Iterable[Running], workers: WorkerRegistry, timings: Timings,
             heard: float | None = None) -> list[Input]:
    """What the clock says at `now` (monotonic): workers lost, jobs failed, jobs requeued.
    `heard` (<= now): every worker message that reached the coordinator before it is applied.
    What waits in the inbox is not silence: a worker's silence, and a job's wait for its group
    or its progress, count to `heard` only (a core busy with a burst of cancels left messages
    waiting 5 s, and 699 of 5,000 live workers were declared lost)."""
    heard = now if heard is None else heard
    # Not a Python walk of every connected worker each tick (15-30 ms at 50,000): the registry
    # finds the silent ones, and only the jobs that have a member reported unwell look at their
    # members (a walk of every running job's members was 9 ms a tick with 1,000 jobs). A worker's
    # job_id is cleared as it disconnects, so the connected ones are all there are.
    out: list[Input] = [Lost(conn, f"no heartbeat for {heard - conn.last_heartbeat:.1f} s")
                        for conn in workers.silent(heard - timings.heartbeat_timeout_s)]
    unwell_jobs = {conn.job_id for conn in workers.unwell.values() if conn.job_id}
    for rj in running:
        if (verdict := _check_job(rj, now, heard, workers, timings, rj.id in unwell_jobs)) is not None:
            out.append(verdict)
    return out


def _check_job(rj: Running, now: float, heard: float, workers: WorkerRegistry, timings: Timings,
               maybe_unwell: bool) -> Input | None:
    if rj.reattach_deadline:
        return Requeue(rj.id) if now > rj.reattach_deadline else None
    unwell = unwell_rank(rj, workers) if maybe_unwell else None
    if rj.blame_deadline and (heard > rj.blame_deadline or unwell is not None):
        cause = describe(rj, unwell, workers) + "; " if unwell is not None else ""
        tail = "" if cause else " (a communication error; no rank reported a cause)"
        return Fail(rj.id, cause + rj.peer_errors[0] + tail)
    if unwell is not None:
        # Counted from the job's start at the earliest: a report from before it (the last words
        # about an executor since replaced) must not fail it before the next heartbeat.
        since = workers.get(rj.members[unwell]).unwell_since
        since = since and max(since, rj.started)
        if since and heard - since >= timings.unwell_s:
            return Fail(rj.id, f"{describe(rj, unwell, workers)} for {heard - since:.0f} s")
    if not rj.formed and heard - rj.started > (limit := rendezvous_timeout(rj)):
        return Fail(rj.id, rendezvous_reason(rj, limit))
    if heard - rj.last_progress > rj.job.spec.op_timeout_s:
        return Fail(rj.id, stall_reason(rj, heard - rj.last_progress, workers))
    return None


def rendezvous_timeout(rj: Running) -> float:
    return rj.job.spec.rendezvous_timeout_s or jobspec.DEFAULT_RENDEZVOUS_TIMEOUT_S  # a job stored by an older version


def rendezvous_reason(rj: Running, limit: float) -> str:
    """Rank 0 opens the group's store; the others join it, and no rank gets past its init until
    every rank joined: the ranks named are those not known to have joined."""
    head = f"the process group did not form within {limit:g} s (rendezvous_timeout_s): "
    if not rj.store_port:
        return head + f"rank 0 (worker {rj.members[0]}) did not open the group's store"
    missing = range(1, len(rj.members))
    if not missing:  # a group of one forms alone: its only rank opened the store and went no further
        return head + f"rank 0 (worker {rj.members[0]}) opened the group's store but did not get past its init"
    verb = " has" if len(missing) == 1 else " have"
    return head + ", ".join(f"rank {r} (worker {rj.members[r]})" for r in missing) + verb + " not joined"


def unwell_rank(rj: Running, workers: WorkerRegistry) -> int | None:
    for rank, wid in enumerate(rj.members):
        conn = workers.get(wid)
        if conn and conn.job_id == rj.id and conn.executor_health in UNWELL:
            return rank
    return None


def describe(rj: Running, rank: int, workers: WorkerRegistry) -> str:
    conn = workers.get(rj.members[rank])
    what = (conn.executor_detail or UNWELL.get(conn.executor_health, "unwell")) if conn else "gone"
    return f"rank {rank} (worker {rj.members[rank]}) is not responding ({what})"


def stall_reason(rj: Running, idle_s: float, workers: WorkerRegistry) -> str:
    seqs = {r: rj.seqs.get(r, 0) for r in range(len(rj.members))}
    head = f"stalled: no progress for {idle_s:.0f} s; "
    unwell = unwell_rank(rj, workers)
    if unwell is not None:
        return head + describe(rj, unwell, workers) + "; " + _ops(seqs)
    if len(set(seqs.values())) == 1 and len(seqs) > 1:
        return head + f"every rank is at op {seqs[0]} and no executor is reported unwell"
    stuck = min(seqs, key=lambda r: seqs[r])
    others = {r: s for r, s in seqs.items() if r != stuck}
    return (head + f"rank {stuck} (worker {rj.members[stuck]}) is at op {seqs[stuck]}"
            + (", " + _ops(others) if others else ""))


def _ops(seqs: dict[int, int]) -> str:
    return ", ".join(f"rank {r} at op {s}" for r, s in seqs.items())
