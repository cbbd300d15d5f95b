"""Queue timeouts: a queued job not placed within its spec's queue_timeout_s is cancelled, with a
reason that says how long it waited and what it was waiting for.

Pure: the control core calls `queue_timeouts(time.time(), queued_jobs)` on each tick and cancels
each job it returns with the reason given. Wall-clock seconds against the stored created_at, so
a coordinator restart neither resets nor extends a job's wait.
"""

from __future__ import annotations

from typing import Iterable

from ringleader.v1 import jobs_pb2 as pb


def queue_timeouts(now: float, queued: Iterable[pb.Job]) -> list[tuple[str, str]]:
    """(job id, reason) for each queued job whose queue timeout has passed (0: waits forever)."""
    out = []
    for job in queued:
        limit = job.spec.queue_timeout_s
        if job.state == pb.QUEUED and limit > 0 and now - job.created_at >= limit:
            waiting = f": {job.reason}" if job.reason else ""
            out.append((job.id, f"still queued after its queue timeout of {limit:g} s{waiting}"))
    return out
