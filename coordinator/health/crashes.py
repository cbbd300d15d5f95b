"""Crashes are evidence: a job that ends because a rank's own executor died or raised is a verdict
on that rank's worker, with the cause and the peers it ran with. Pure; the control core feeds it
(coordinator/core/health_inputs.py's `_crashed`) and records what it returns in the health book.

Only a rank's report about itself counts (its own Done: EXECUTOR_DIED, RANK_ERROR): a PEER_ERROR
is what a rank saw of another one, and never blames anyone here.

    one crash                      SUSPECT: the cause (e.g. "executor process killed by signal 11")
                                   and the peers of that job
    failures all with one peer set SUSPECT, saying so: the link to those peers, or a peer, may be
                                   the cause as much as this worker
    REPEAT executor deaths with    UNHEALTHY, a repeat offender: kept out of user jobs until a check
    PEER_SETS distinct peer sets   passes (any check's passing verdict replaces a crash verdict:
    within WINDOW_S                coordinator/health/book.py)

A RANK_ERROR (an exception in the rank: NCCL's, CUDA's, or a job's own) makes a worker suspect but
never a repeat offender: a user's job that raises on every worker it lands on would otherwise
quarantine healthy ones. An executor killed by a signal or gone is not a job's doing.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

CHECK = "crash"  # the health book's name for this evidence
WINDOW_S = 3600.0
REPEAT = 3
PEER_SETS = 2
KEPT = 16  # crashes kept per worker (the window's, at most)
CAUSE_MAX = 200
BLAMED = {wpb.EXECUTOR_DIED: "executor died", wpb.RANK_ERROR: "rank error"}


@dataclass(frozen=True)
class Crash:
    at: float
    job_id: str
    died: bool  # the executor died (EXECUTOR_DIED), not an exception in the rank
    cause: str
    peers: tuple[str, ...]


class CrashLog:
    """Each worker's recent crashes (its own reports), within WINDOW_S."""

    def __init__(self) -> None:
        self._by_worker: dict[str, collections.deque[Crash]] = {}

    def add(self, worker_id: str, failure: int, cause: str, job_id: str, members: list[str],
            now: float) -> pb.WorkerHealth | None:
        """A rank's own failure report ended job `job_id` on `members`: the worker's verdict from
        its crashes so far (None: the report is not about the worker itself)."""
        if failure not in BLAMED:
            return None
        log = self._by_worker.setdefault(worker_id, collections.deque(maxlen=KEPT))
        while log and now - log[0].at > WINDOW_S:
            log.popleft()
        peers = tuple(sorted(m for m in members if m != worker_id))
        log.append(Crash(now, job_id, failure == wpb.EXECUTOR_DIED, cause[:CAUSE_MAX], peers))
        return verdict(list(log), now)

    def recent(self, worker_id: str) -> list[Crash]:
        return list(self._by_worker.get(worker_id, ()))


def verdict(crashes: list[Crash], now: float) -> pb.WorkerHealth:
    last = crashes[-1]
    n = len(crashes)
    peer_sets = {c.peers for c in crashes}
    died = [c for c in crashes if c.died]
    died_sets = {c.peers for c in died}
    with_ = ", ".join(last.peers) or "no peers"
    figure = f"job {last.job_id}: {last.cause} (with {with_}); {n} failure{'s' if n > 1 else ''} in the last hour"
    if len(died) >= REPEAT and len(died_sets) >= PEER_SETS:
        return pb.WorkerHealth(verdict=pb.UNHEALTHY, check=CHECK, figure=figure, at=now, job_id=last.job_id,
                               expected=f"repeat offender: its executor died {len(died)} times with "
                                        f"{len(died_sets)} different peer sets within {WINDOW_S / 3600:g} h; "
                                        f"kept out until a check passes")
    if n > 1 and len(peer_sets) == 1 and last.peers:
        expected = (f"every failure with the same peers ({with_}): the link to them, or a peer, may be the cause "
                    f"as much as this worker")
    else:
        expected = f"no crash; {REPEAT} executor deaths with {PEER_SETS}+ different peer sets make a repeat offender"
    return pb.WorkerHealth(verdict=pb.SUSPECT, check=CHECK, figure=figure, expected=expected, at=now,
                           job_id=last.job_id)
