"""In-memory JobStore: for tests and `--db :memory:`. Nothing survives the process."""

from __future__ import annotations

from typing import Iterable

from coordinator.store.api import UNFINISHED, JobStore, apply_update, job_op, store_limit
from coordinator.store.hook_log import MemoryHookLog
from coordinator.store.trends import MemoryTrends
from ringleader.defaults import PAGE_DEFAULT
from ringleader.errors import AlreadyExists, NotFound
from ringleader.v1 import jobs_pb2 as pb


def _copy(msg):
    # Every message crossing the store boundary is a fresh copy: callers (servicers, scheduler)
    # mutate the Jobs they hold, and that must not change what the store has recorded.
    out = type(msg)()
    out.CopyFrom(msg)
    return out


class MemoryJobStore(MemoryTrends, JobStore):
    def __init__(self) -> None:
        self._seq = 0  # submission counter: order of `create` calls
        self._order: dict[str, int] = {}
        self._jobs: dict[str, pb.Job] = {}  # stored without results
        self._results: dict[str, list[pb.SizeResult]] = {}
        self._events: dict[str, list[pb.JobEvent]] = {}
        self._logs: dict[str, dict[int, str]] = {}
        self._requests: dict[str, str] = {}  # request id -> job id
        self._health: dict[str, pb.WorkerHealth] = {}
        self._credentials: dict[str, str] = {}  # worker id -> credential digest
        self._baselines: dict[str, pb.BaselineEntry] = {}
        self._hook_log = MemoryHookLog()

    def put_hook_delivery(self, d: pb.HooksDelivery) -> None:
        self._hook_log.put(d)

    def hook_deliveries(self, limit: int = 0) -> list[pb.HooksDelivery]:
        return self._hook_log.newest(limit)

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
        if job.request_id in self._requests:
            raise AlreadyExists(f"request {job.request_id} already created job {self._requests[job.request_id]}")
        stored = _copy(job)
        self._results[job.id] = [_copy(r) for r in stored.results]
        stored.ClearField("results")
        self._seq += 1
        self._order[job.id] = self._seq
        self._jobs[job.id] = stored
        self._events[job.id] = []
        self._logs[job.id] = {}
        if job.request_id:
            self._requests[job.request_id] = job.id

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

    def set_rank_log(self, job_id: str, rank: int, text: str) -> None:
        self._known(job_id)
        self._logs[job_id][rank] = text

    def rank_logs(self, job_id: str) -> dict[int, str]:
        self._known(job_id)
        return dict(sorted(self._logs[job_id].items()))

    def list(
        self, states: Iterable[int] = (), op: str = "", limit: int = PAGE_DEFAULT, before_id: str = ""
    ) -> list[pb.Job]:
        wanted = {int(s) for s in states}
        below = self._order[self._known(before_id).id] if before_id else None
        n = store_limit(limit)
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

    def job_for_request(self, request_id: str) -> str:
        return self._requests.get(request_id, "")

    def unfinished(self) -> list[pb.Job]:
        ids = sorted(self._jobs, key=self._order.__getitem__)
        return [self._full(i) for i in ids if self._jobs[i].state in UNFINISHED]

    def set_worker_health(self, worker_id: str, health: pb.WorkerHealth) -> None:
        self._health[worker_id] = _copy(health)

    def worker_health(self) -> dict[str, pb.WorkerHealth]:
        return {w: _copy(h) for w, h in self._health.items()}

    def worker_credential(self, worker_id: str) -> str:
        return self._credentials.get(worker_id, "")

    def set_worker_credential(self, worker_id: str, digest: str) -> None:
        self._credentials[worker_id] = digest

    def forget_worker_credential(self, worker_id: str) -> bool:
        return self._credentials.pop(worker_id, None) is not None
    def put_baseline(self, entry: pb.BaselineEntry) -> None:
        self._baselines[entry.key] = _copy(entry)

    def baseline(self, key: str) -> pb.BaselineEntry | None:
        e = self._baselines.get(key)
        return _copy(e) if e is not None else None

    def baselines(self, after: str = "", limit: int = 0) -> list[pb.BaselineEntry]:
        keys = [k for k in sorted(self._baselines) if k > after]
        return [_copy(self._baselines[k]) for k in (keys[:limit] if limit else keys)]
