"""The edge's read view: a copy of the live jobs, the recently changed ones and the workers, kept
on the edge loop, from which GetJob, ListJobs and ListWorkers (gRPC and REST) are answered without
waiting on the core loop.

Why: hopped to the core (coordinator/edge/hop.py), a read waited for every turn its body spanned;
with the core's loop held up 3 or 8 s (a burst of worker messages, a long pass), every GetJob and
ListJobs waited the whole hold. Here the core hands over what changed (coordinator/edge/read_feed.py:
one hop per turn that changed anything, and a stamp on a clock) and the edge answers from its copy,
saying how old it is (`read_view_age_ms`: milliseconds since the core last brought it up to date).

What the view holds, and where it is not enough:
- jobs: every queued and running job (its waiting reason and progress as the core shows them),
  and the last KEEP_ENDED that ended, without result rows. A job with rows, or one the view does
  not hold (older), is read from the store on a thread (SQLite: its connection is shared under a
  lock, reads included; the core holds it only for a statement), with the view's fields laid over
  a row the view knows newer.
- job listings: the store's page, read on a thread as before (so the order, the filters and the
  page tokens are the store's, unchanged), each row's waiting reason and progress from the view.
- workers: each worker's listing (WorkerInfo, its listed state), in the registry's order, paged
  as the registry pages it.

Fresh while the core keeps up: a read first asks the core to hand over what it has (`fresh`: one
hop, shared by the reads that arrive before it starts, and no more than a flush of the feed on the
core) and waits for it at most FRESH_WAIT_S; then it answers from the view, current or as old as
it says. So a read that follows a change its client saw (its own write, a watched event, a state
a test read off the core) sees it whenever the core answers within that wait, and a read never
waits for a held-up core longer than that. Every write a client makes through the edge (gRPC or
REST) also ends with the core handing the view what it changed, before the answer.

Only the edge loop touches a ReadView."""

from __future__ import annotations

import asyncio
import bisect
import collections
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterable

from coordinator.core import paging
from coordinator.core.jobs import Page
from coordinator.store.api import JobStore
from ringleader import jobspec, kinds, states
from ringleader.defaults import page_limit
from ringleader.page_token import SortKey, decode_token, encode_token
from ringleader.v1 import jobs_pb2 as pb

FRESH_WAIT_S = 0.04  # a read waits this long at most for the core to bring the view up to date
KEEP_ENDED = 2000  # ended jobs kept (their listing fields; GetJob reads their rows from the store)


@dataclass
class ViewWorker:
    key: SortKey  # (host, device index, worker id): the registry's listing order
    info: pb.WorkerInfo  # as ListWorkers shows it: listed state, health
    # The core's connection, whose heartbeat time an answer reads as it is (a float the core
    # writes, read whole: a benign cross-thread read); None: the time in `info`.
    conn: object = None


@dataclass
class ViewUpdate:
    """What the core hands over in one hop (coordinator/edge/read_feed.py)."""
    stamp: float  # time.monotonic() on the core when this was current
    jobs: list[tuple[pb.Job, bool]] = field(default_factory=list)  # (copy without rows, has rows)
    workers: list[ViewWorker] = field(default_factory=list)  # new or changed
    gone: list[str] = field(default_factory=list)  # worker ids the registry forgot
    full: bool = False  # `workers` is every worker: any other is gone


Fresh = Callable[[], Awaitable[None]]  # bring the view up to date


class ReadView:
    """`fresh`: asks the core for what it has (coordinator/edge/read_feed.py's `Freshen`; None:
    the view as it is)."""

    def __init__(self, store: JobStore, fresh: Fresh | None = None) -> None:
        self.store = store
        self.fresh = fresh
        self.stamp = 0.0  # 0: the core has handed nothing over yet
        self._jobs: dict[str, pb.Job] = {}
        self._rows: set[str] = set()  # jobs with result rows (GetJob reads those from the store)
        self._ended: collections.OrderedDict[str, None] = collections.OrderedDict()  # oldest first
        self._workers: dict[str, ViewWorker] = {}
        self._order: list[SortKey] = []
        self.updates = 0  # applied (a test's and the bench's count)

    # ---- kept current (on the edge loop) --------------------------------------------------

    def apply(self, update: ViewUpdate) -> None:
        for job, has_rows in update.jobs:
            self._put(job, has_rows)
        if update.full:
            keep = {w.key[2] for w in update.workers}
            update.gone = [w for w in self._workers if w not in keep]
        for worker_id in update.gone:
            self._drop_worker(worker_id)
        for w in update.workers:
            self._put_worker(w)
        self.stamp = max(self.stamp, update.stamp)
        self.updates += 1

    def _put(self, job: pb.Job, has_rows: bool) -> None:
        self._jobs[job.id] = job
        (self._rows.add if has_rows else self._rows.discard)(job.id)
        if states.is_terminal(job.state):
            self._ended[job.id] = None
            self._ended.move_to_end(job.id)
            while len(self._ended) > KEEP_ENDED:
                old, _ = self._ended.popitem(last=False)
                self._jobs.pop(old, None)
                self._rows.discard(old)
        else:
            self._ended.pop(job.id, None)  # requeued: live again

    def _put_worker(self, w: ViewWorker) -> None:
        old = self._workers.get(w.key[2])
        if old is not None and old.key != w.key:
            self._drop_worker(w.key[2])
            old = None
        if old is None:
            bisect.insort(self._order, w.key)
        self._workers[w.key[2]] = w

    def _drop_worker(self, worker_id: str) -> None:
        old = self._workers.pop(worker_id, None)
        if old is not None:
            i = bisect.bisect_left(self._order, old.key)
            if i < len(self._order) and self._order[i] == old.key:
                del self._order[i]

    async def _freshen(self) -> None:
        if self.fresh is not None:
            await self.fresh()

    def age_ms(self) -> int:
        """Milliseconds since the core last brought the view up to date."""
        return int(max(0.0, time.monotonic() - self.stamp) * 1000) if self.stamp else 0

    # ---- answers (on the edge loop) --------------------------------------------------------

    async def get_job(self, job_id: str) -> pb.Job:
        """GetJob's answer (NotFound as the store says it), with `read_view_age_ms`."""
        jobspec.check_text("job_id", job_id)
        await self._freshen()
        age, held = self.age_ms(), self._jobs.get(job_id)
        if held is not None and job_id not in self._rows and not states.is_terminal(held.state):
            out = pb.Job()
            out.CopyFrom(held)
        else:
            out = await asyncio.get_running_loop().run_in_executor(None, self._stored, job_id)
            held = self._jobs.get(job_id)  # what came meanwhile
            if held is not None:
                out = self._laid_over(out, held)
        out.read_view_age_ms = age
        return out

    def _stored(self, job_id: str) -> pb.Job:  # on a thread
        if not self.store.resident(job_id, ""):
            self.store.prefetch(job_id, "")
        return self.store.get(job_id)

    @staticmethod
    def _laid_over(stored: pb.Job, held: pb.Job) -> pb.Job:
        """The stored row with what the view knows of it: a row whose state the view has seen
        change (its commit to come) is the view's copy with the row's results. But a job the view
        has seen end is shown as stored until its end is stored: its last rows come in that
        commit, and a finished job read with some of its rows (SUCCEEDED with 1 of its 2 sizes,
        once in a make test run under load) tells a client its results are complete."""
        if states.is_terminal(held.state) and not states.is_terminal(stored.state):
            return stored
        if stored.state != held.state:
            out = pb.Job()
            out.CopyFrom(held)
            out.results.extend(stored.results)
            return out
        stored.reason = held.reason
        stored.progress.CopyFrom(held.progress)
        return stored

    async def list_jobs(self, states_: Iterable[int] = (), op: str = "", limit: int = 0,
                        before_id: str = "") -> tuple[Page, int]:
        """ListJobs' page (the store's rows, read on a thread) and the view's age; the same
        checks and byte bound as the core's listing (coordinator/shell/facade.py's list_jobs)."""
        kinds.check_listed(op)
        jobspec.check_text("before_id", before_id)
        await self._freshen()
        age, n, wanted = self.age_ms(), page_limit(limit), list(states_)
        # One more than asked tells whether another page exists (the store allows a page + 1).
        rows = await asyncio.get_running_loop().run_in_executor(
            None, lambda: self.store.list(states=wanted, op=op, limit=n + 1, before_id=before_id))
        more = len(rows) > n
        jobs = rows[:n]
        for job in jobs:
            held = self._jobs.get(job.id)
            if held is not None and held.state == job.state:
                job.reason = held.reason
                job.progress.CopyFrom(held.progress)
        keep = paging.fitting(job.ByteSize() for job in jobs)
        if keep < len(jobs):
            return Page(jobs[:keep], jobs[keep - 1].id), age
        return Page(jobs, jobs[-1].id if more and jobs else ""), age

    async def list_workers(self, states_: Iterable[int] = (), limit: int = 0,
                           page_token: str = "") -> tuple[list[pb.WorkerInfo], str, int]:
        """ListWorkers' page (workers, next token, the view's age), in the registry's order and
        with its tokens (InvalidSpec naming page_token for one it never issued)."""
        after = decode_token(page_token) if page_token else None
        await self._freshen()
        age, wanted, n = self.age_ms(), set(states_), page_limit(limit)
        start = bisect.bisect_right(self._order, after) if after else 0
        picked: list[ViewWorker] = []
        token = ""
        for key in self._order[start:]:
            w = self._workers[key[2]]
            if wanted and w.info.state not in wanted:
                continue
            if len(picked) == n:
                token = encode_token(picked[-1].key)
                break
            picked.append(w)
        keep = paging.fitting(w.info.ByteSize() for w in picked)
        if keep < len(picked):
            token = encode_token(picked[keep - 1].key)
            picked = picked[:keep]
        infos = []
        for w in picked:
            (info := pb.WorkerInfo()).CopyFrom(w.info)
            if w.conn is not None:
                info.last_heartbeat = w.conn.last_heartbeat_wall
            infos.append(info)
        return infos, token, age
