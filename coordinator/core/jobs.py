"""The job book: unfinished jobs in memory, and every job state change through `transition`.

The store is the record; the book holds what is queued or running (with each job's checked
spec, so nothing is validated twice) and the per-run bookkeeping that failure detection needs.
`transition` checks the change against ringleader.states.JOBS, writes it, and records the event.
"""

from __future__ import annotations

import collections
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable

from coordinator.store.api import JobStore
from coordinator.core.clock import Clock, SystemClock
from coordinator.core.events import EventBus
from coordinator.core.queue_heap import QueueHeap
from ringleader import jobspec, states
from ringleader.defaults import page_limit
from ringleader.jobspec import ValidJob
from ringleader.v1 import jobs_pb2 as pb

log = logging.getLogger("ringleader.coordinator")

ENDED_KEPT = 8192  # ended jobs whose members JobBook.members answers from memory


@dataclass
class Queued:
    job: pb.Job
    valid: ValidJob

    def deadline(self) -> float:
        """When its queue_timeout_s ends (0.0: none), wall clock from created_at."""
        limit = self.valid.spec.queue_timeout_s
        return self.job.created_at + limit if limit > 0 else 0.0


@dataclass
class Running:
    job: pb.Job
    valid: ValidJob
    members: list[str]  # worker ids in rank order
    group_key: str
    store_port: int = 0  # rank 0's TCP store, once it reported it (a new group)
    assigned: set[int] = field(default_factory=set)  # ranks sent their assignment
    finished_ranks: set[int] = field(default_factory=set)
    attached: set[int] = field(default_factory=set)  # ranks whose worker is connected to it
    last_progress: float = field(default_factory=time.monotonic)
    seqs: dict[int, int] = field(default_factory=dict)  # rank -> op counter from heartbeats
    reattach_deadline: float = 0.0  # > 0 while waiting for workers after a coordinator restart
    held: set[int] = field(default_factory=set)  # back from a restart without it (restart.py)
    rank0_forming: bool = False  # rank 0, back from a restart, still forms the group (restart.py)
    peer_errors: list[str] = field(default_factory=list)  # victims' reports, kept until the cause shows
    blame_deadline: float = 0.0
    started: float = field(default_factory=time.monotonic)
    # Whether its process group is up (a warm one, or some rank got past init); a new group that
    # is not formed within the spec's rendezvous_timeout_s fails the job.
    formed: bool = False
    op_base: dict[int, int] = field(default_factory=dict)  # rank -> op counter when the job started
    rows: set[tuple] = field(default_factory=set)  # row_key of every result row stored
    quiet_ranks: set[int] = field(default_factory=set)  # finished with an empty log, not stored (dispatch)
    regressions: list[str] = field(default_factory=list)  # baseline regressions its rows raised
    baseline_fields: object = None  # baselines.KeyFields of its gang, found at its first row
    evidence: dict[int, object] = field(default_factory=dict)  # a check's: rank -> its own evidence (assemble.py)

    @property
    def id(self) -> str:
        return self.job.id


def row_key(row: pb.SizeResult) -> tuple:
    """What tells a job's result rows apart: a row with the same key is the same measurement."""
    return (row.size_bytes, row.algo, row.mode, row.in_place)


@dataclass
class Page:
    jobs: list[pb.Job]
    next_before: str  # "" on the last page


class JobBook:
    def __init__(self, store: JobStore, events: EventBus, clock: Clock | None = None,
                 new_id: Callable[[], str] = lambda: uuid.uuid4().hex) -> None:
        self.new_id = new_id
        self.store = store
        self.events = events
        self.clock = clock or SystemClock()  # a control core gives its own: the time of the input applied
        self.queued: dict[str, Queued] = {}
        self.running: dict[str, Running] = {}
        # The members of the jobs ended last, for their ranks' late reports (the logs of ranks
        # aborted by a cancel or another rank's failure): read from the store, each was two
        # statements per rank (the job, its results), 10,000 in a churn's burst of cancels.
        self._ended: collections.OrderedDict[str, list[str]] = collections.OrderedDict()
        self._by_age = QueueHeap(self.queued, lambda q: q.job.created_at)  # the oldest, for each scrape

    def load(self, reattach_deadline: float) -> list[Queued]:
        """After a (re)start: queued jobs queue again (returned, for the scheduler); running ones
        wait for their workers."""
        queued = []
        for job in self.store.unfinished():
            valid = jobspec.normalize(job.spec)
            if job.state == pb.QUEUED:
                queued.append(self._enqueue(Queued(job, valid)))
            else:
                members = [w.worker_id for w in sorted(job.workers, key=lambda w: w.rank)]
                rows = {row_key(r) for r in job.results}
                self.running[job.id] = Running(job, valid, members, group_key="", formed=True, rows=rows,
                                               reattach_deadline=reattach_deadline, last_progress=self.clock.mono,
                                               started=self.clock.mono)
        return queued

    # ---- reading ---------------------------------------------------------------------------

    def get(self, job_id: str) -> pb.Job:
        """The job as stored, with what is kept in memory only. A queued job, or a running one
        with no result rows, is what the store holds: answered from memory, without the two
        reads (the job, its results) of every GetJob and of every submit's answer."""
        if (q := self.queued.get(job_id)) is not None:
            return self.copy(q.job)
        if (rj := self.running.get(job_id)) is not None and not rj.rows:
            return self.copy(rj.job)
        return self.live(self.store.get(job_id))

    def copy(self, job: pb.Job) -> pb.Job:
        """`get`'s answer for a job held here that has no result rows, without the store's read."""
        (out := pb.Job()).CopyFrom(job)
        return self.live(out)

    def live(self, job: pb.Job) -> pb.Job:
        """What is kept in memory only: a running job's progress (a queued job's waiting reason
        is the scheduler's: control.Control fills it in)."""
        if (live := self.running.get(job.id)) is not None:
            job.progress.CopyFrom(live.job.progress)
        return job

    def counts(self) -> tuple[int, int, float]:
        """Queued, running, and when the oldest queued job was submitted (0.0: none), from memory
        without a list of them (read at every scrape)."""
        return len(self.queued), len(self.running), self._by_age.first()

    def rows(self, states_: Iterable[int] = (), op: str = "", limit: int = 0, before_id: str = "") -> list[pb.Job]:
        """The store's rows for `page`: only the store is read, so a thread may call it."""
        # One more than asked tells whether another page exists (the store allows a page + 1).
        return self.store.list(states=states_, op=op, limit=page_limit(limit) + 1, before_id=before_id)

    def page(self, states_: Iterable[int] = (), op: str = "", limit: int = 0, before_id: str = "",
             rows: list[pb.Job] | None = None) -> Page:
        """One page of jobs, newest first, with the id to pass as `before_id` for the next one
        (from `rows` when they were read beforehand)."""
        n = page_limit(limit)
        jobs = self.rows(states_, op, limit, before_id) if rows is None else rows
        more = len(jobs) > n
        jobs = jobs[:n]
        for job in jobs:
            self.live(job)
        return Page(jobs, jobs[-1].id if more else "")

    # ---- changing --------------------------------------------------------------------------

    def submit(self, valid: ValidJob, request_id: str = "") -> pb.Job:
        job = pb.Job(id=self.new_id()[:12], spec=valid.spec, state=pb.QUEUED,
                     reason="waiting for workers", created_at=self.clock.wall, request_id=request_id)
        self.store.create(job)
        self.events.created(job.id)
        self._record_state(job)
        return self._enqueue(Queued(job, valid)).job

    def transition(self, job: pb.Job, to: int, reason: str) -> None:
        """The one way a job's state changes: checked, stored, recorded as an event."""
        states.JOBS.check(job.state, to)
        job.state, job.reason = to, reason
        if states.is_terminal(to):
            job.finished_at = self.clock.wall
        self.store.update(job)
        self._record_state(job)
        log.info("job %s %s: %s", job.id, pb.JobState.Name(to), reason)

    def start(self, job_id: str, members: list[pb.WorkerRef], backend: str, group_key: str,
              warm: bool) -> Running:
        q = self._dequeue(job_id)
        job = q.job
        del job.workers[:]
        job.workers.extend(members)
        job.backend, job.warm_start, job.started_at = backend, warm, self.clock.wall
        job.progress.CopyFrom(pb.Progress(total=q.valid.progress_total))
        rj = Running(job, q.valid, [m.worker_id for m in members], group_key,
                     attached=set(range(len(members))), formed=warm, last_progress=self.clock.mono,
                     started=self.clock.mono)
        self.running[job_id] = rj
        ids = ", ".join(rj.members)
        self.transition(job, pb.RUNNING, f"running on {ids}" + (" (warm group)" if warm else ""))
        return rj

    def finish(self, job_id: str, to: int, reason: str) -> None:
        """End a queued or running job (the caller tells its workers)."""
        live = self.running.pop(job_id, None) or self._dequeue(job_id)
        self.transition(live.job, to, reason)
        if isinstance(live, Running):
            self._ended[job_id] = live.members
            if len(self._ended) > ENDED_KEPT:
                self._ended.popitem(last=False)

    def members(self, job_id: str) -> list[str]:
        """A job's worker ids in rank order: of a running job, one of the last ENDED_KEPT ended,
        or read from the store (NotFound for a job it does not have)."""
        if (rj := self.running.get(job_id)) is not None:
            return rj.members
        if (ended := self._ended.get(job_id)) is not None:
            return ended
        return [w.worker_id for w in sorted(self.store.get(job_id).workers, key=lambda w: w.rank)]

    def requeue(self, rj: Running, reason: str) -> Queued:
        """A job interrupted by a coordinator restart whose workers did not all come back."""
        self.running.pop(rj.id)
        self.store.clear_results(rj.id)
        job = rj.job
        del job.workers[:]
        job.started_at, job.backend, job.warm_start = 0.0, "", False
        job.progress.Clear()
        self.transition(job, pb.QUEUED, reason)
        return self._enqueue(Queued(job, rj.valid))

    def _enqueue(self, q: Queued) -> Queued:
        self.queued[q.job.id] = q
        self._by_age.add(q.job.id, q)
        return q

    def _dequeue(self, job_id: str) -> Queued:
        return self.queued.pop(job_id)

    def _record_state(self, job: pb.Job) -> None:
        self.events.record(pb.JobEvent(job_id=job.id, state=pb.StateChange(state=job.state, reason=job.reason)), job)

