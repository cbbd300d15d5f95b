"""A check that waits too long holds its workers.

Checks queue at the lowest priority (ringleader/checks.py) and name their workers, so a check
starts only when every worker it names is idle at once and no user job ahead takes one of them.
On a fleet with steady user traffic that moment never comes: each worker that frees up is taken
by the next user job, and the fleet goes unchecked. So a check job queued for
`check_hold_after_s` moves ahead of user jobs in the placement queue (its stored priority is
unchanged). Ahead of them, it reserves its named workers as they free up (the scheduler's rule
for a job that cannot start yet), so no new user job lands on them, and it starts once the last
one's job ends. Running jobs are never stopped. At most `check_hold_share` of the connected
workers are held at once (at least one check), oldest check first, so checks can delay only
that share of the fleet's user jobs. A check that names a worker no longer connected is passed
over until it is back.
"""

from __future__ import annotations

import dataclasses
import logging

from coordinator.core.jobs import JobBook, Queued
from coordinator.core.liveness import Timings
from coordinator.core.registry import WorkerRegistry
from coordinator.core.scheduler import Scheduler
from ringleader import checks
from ringleader.jobspec import MAX_PRIORITY

log = logging.getLogger("ringleader.coordinator")


class CheckHold:
    """The checks waiting to be placed, and those moved ahead of user jobs. Control (control.py)
    tells it of each job it queues (`note`) and asks it at each tick (`hold`)."""

    def __init__(self, timings: Timings, book: JobBook, scheduler: Scheduler, workers: WorkerRegistry) -> None:
        self.timings, self.book, self.scheduler, self.workers = timings, book, scheduler, workers
        self.waiting: dict[str, float] = {}  # queued check job -> created_at (wall), oldest first
        self.held: set[str] = set()  # those moved ahead of user jobs

    def note(self, q: Queued) -> None:
        if checks.is_check(q.valid.spec):
            self.waiting[q.job.id] = q.job.created_at

    def hold(self, wall: float) -> bool:
        """At each tick: move the checks that have waited long enough ahead, within the share.
        True if the placement queue changed."""
        after = self.timings.check_hold_after_s
        if not after or not self.waiting:
            return False
        for job_id in [j for j in self.waiting if j not in self.book.queued]:
            del self.waiting[job_id]  # started, cancelled or failed
            self.held.discard(job_id)
        # A check the connected fleet cannot run (a worker it names is gone) holds nothing and
        # takes no share: it reserves nothing, and must not keep other checks from their turn.
        pending = {j: p for j in self.waiting
                   if (p := self.scheduler.pending(j)) is not None and self.scheduler.runnable(j)}
        held = sum(pending[j].need.world_size for j in self.held if j in pending)
        share = int(self.timings.check_hold_share * self.workers.n_connected())
        changed = False
        for job_id, created in self.waiting.items():
            p = pending.get(job_id)
            if p is None or job_id in self.held or wall - created < after:
                continue
            if held and held + p.need.world_size > share:
                break  # oldest first: a later check waits for an earlier one's workers to free
            self.scheduler.add(dataclasses.replace(p, priority=MAX_PRIORITY))
            self.held.add(job_id)
            held += p.need.world_size
            changed = True
            log.info("check job %s queued %.0f s: its %d workers take no new user job until it starts",
                     job_id, wall - created, p.need.world_size)
        return changed
