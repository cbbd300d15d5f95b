"""In-memory JobStore: for tests and `--store :memory:`. Nothing survives the process.

Also holds the rules both stores share (which fields `update` may change, the `list` limit), so
the SQLite store enforces exactly the same contract instead of a look-alike copy of it.
"""

from __future__ import annotations

from typing import Iterable

from coordinator.api import JobStore
from ringleader.errors import AlreadyExists, NotFound
from ringleader.jobspec import op_name
from ringleader.v1 import jobs_pb2 as pb

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000


def apply_update(stored: pb.Job, job: pb.Job) -> None:
    """Copy the fields that change over a job's life from `job` into `stored` (in place).

    Only these: state, reason, started_at, finished_at, workers, backend, progress, warm_start,
    and the outcome of non-collective kinds (p2p, gradient_average, train).
    So a caller holding a stale or trimmed Job can never rewrite the spec, created_at or results.
    """
    # Spelled out rather than driven by descriptors: the descriptor API (e.g. `label`) differs
    # between protobuf 6 and 7, and both must work.
    for name in ("state", "reason", "started_at", "finished_at", "backend", "warm_start"):
        setattr(stored, name, getattr(job, name))
    del stored.workers[:]
    stored.workers.extend(job.workers)
    for name in ("progress", "p2p", "gradient_average", "train"):
        stored.ClearField(name)
        if job.HasField(name):  # an unset message stays unset; CopyFrom would mark it present
            getattr(stored, name).CopyFrom(getattr(job, name))


def page_limit(limit: int) -> int:
    """0 (the proto default of an unset ListJobsRequest.limit) means the default page size."""
    if limit <= 0:
        return DEFAULT_LIMIT
    return min(limit, MAX_LIMIT)


def job_op(job: pb.Job) -> str:
    """The op `list` filters on: the collective op, or the job kind (p2p, train, ...)."""
    return op_name(job.spec)


def _copy(msg):
    # Every message crossing the store boundary is a fresh copy: callers (servicers, scheduler)
    # mutate the Jobs they hold, and that must not change what the store has recorded.
    out = type(msg)()
    out.CopyFrom(msg)
    return out


class MemoryJobStore(JobStore):
    def __init__(self) -> None:
        self._seq = 0  # submission counter: order of `create` calls
        self._order: dict[str, int] = {}
        self._jobs: dict[str, pb.Job] = {}  # stored without results
        self._results: dict[str, list[pb.SizeResult]] = {}
        self._events: dict[str, list[pb.JobEvent]] = {}

    def _known(self, job_id: str) -> pb.Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise NotFound(f"job {job_id} not found") from None

    def _full(self, job_id: str) -> pb.Job:
        job = _copy(self._jobs[job_id])
        job.results.extend(self._results[job_id])  # extend copies the elements
        return job

    def create(self, job: pb.Job) -> None:
        if job.id in self._jobs:
            raise AlreadyExists(f"job {job.id} already exists")
        stored = _copy(job)
        self._results[job.id] = [_copy(r) for r in stored.results]
        stored.ClearField("results")
        self._seq += 1
        self._order[job.id] = self._seq
        self._jobs[job.id] = stored
        self._events[job.id] = []

    def get(self, job_id: str) -> pb.Job:
        self._known(job_id)
        return self._full(job_id)

    def update(self, job: pb.Job) -> None:
        apply_update(self._known(job.id), job)

    def add_event(self, event: pb.JobEvent) -> None:
        self._known(event.job_id)
        self._events[event.job_id].append(_copy(event))

    def events(self, job_id: str) -> list[pb.JobEvent]:
        self._known(job_id)
        return [_copy(e) for e in self._events[job_id]]

    def add_result(self, job_id: str, result: pb.SizeResult) -> None:
        self._known(job_id)
        self._results[job_id].append(_copy(result))

    def clear_results(self, job_id: str) -> None:
        self._known(job_id)
        self._results[job_id].clear()

    def list(
        self, states: Iterable[int] = (), op: str = "", limit: int = 50, before_id: str = ""
    ) -> list[pb.Job]:
        wanted = {int(s) for s in states}
        below = self._order[self._known(before_id).id] if before_id else None
        n = page_limit(limit)
        out: list[pb.Job] = []
        for job_id in sorted(self._jobs, key=self._order.__getitem__, reverse=True):
            job = self._jobs[job_id]
            if below is not None and self._order[job_id] >= below:
                continue
            if wanted and job.state not in wanted:
                continue
            if op and job_op(job) != op:
                continue
            out.append(_copy(job))
            if len(out) == n:
                break
        return out

    def unfinished(self) -> list[pb.Job]:
        ids = sorted(self._jobs, key=self._order.__getitem__)
        return [self._full(i) for i in ids if self._jobs[i].state in (pb.QUEUED, pb.RUNNING)]
