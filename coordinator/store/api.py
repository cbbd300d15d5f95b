"""The job store's contract and the rules every implementation shares. Read this first.

Implementations: coordinator/store/memory.py (tests, `--db :memory:`),
coordinator/store/sqlite.py (the default) and coordinator/store/postgres.py (`--db postgresql://...`,
several coordinators, one leading: coordinator/store/lease.py); coordinator/store/factory.py picks one.
"""

from __future__ import annotations

import abc
from typing import Callable, Iterable

from coordinator.store.trends import TrendBucket, TrendHour, TrendPoint, TrendQuery
from ringleader import kinds, states
from ringleader.defaults import PAGE_DEFAULT, PAGE_MAX
from ringleader.jobspec import op_name
from ringleader.v1 import jobs_pb2 as pb

UNFINISHED = states.UNFINISHED


class JobStore(abc.ABC):
    """Durable record of jobs, their specs, state changes (events) and results.

    Contract (tests/unit/test_store_contract.py runs it against every implementation):
    - `create` MUST fail with AlreadyExists if the id is known, or if the job's `request_id` (its
      idempotency key, when not empty) is another job's; it records the submission order.
    - `job_for_request` returns the id of the job created with that request id ("" if none).
    - `get`, `update`, `add_event`, `add_result`, `clear_results` MUST fail with NotFound if
      the job is unknown.
    - `get` returns the job with its results in the order they were added.
    - `update` replaces only the fields that change over a job's life (state, reason,
      started_at, finished_at, workers, backend, progress, warm_start, and the outcome of
      non-collective kinds: ringleader.kinds.result_fields()) and stragglers; it keeps the stored spec
      and created_at and ignores the given Job's results (see add_result/clear_results).
    - `list` returns newest first, without results, filtered by states (any of; empty: all) and
      op (the collective op, or the job kind for other kinds; empty: all), at most
      `store_limit(limit)` rows (0: the default page; capped at the largest page + 1, so a
      pager can ask for one row more than a page to tell whether another follows), only jobs
      submitted before `before_id` when it is given (NotFound if that id is unknown).
    - `unfinished` returns QUEUED and RUNNING jobs in submission order (oldest first), with
      their results as `get` returns them.
    - `events` returns a job's events in the order they were added (NotFound if unknown).
    - `set_rank_log` stores one rank's log text, replacing that rank's earlier one (a rerun);
      `rank_logs` returns {rank: text} of the ranks that have one. Both MUST fail with NotFound
      if the job is unknown. Logs are kept apart from the Job: `get` and `list` never carry them.
    - `set_worker_health` stores a worker's health verdict (coordinator/health/fleet.py), replacing
      its earlier one; `worker_health` returns {worker id: verdict} of every worker that has
      one. Verdicts belong to worker ids, not jobs: a worker never seen again keeps its row.
    - `worker_credential` returns the credential digest bound to a worker id ("" if none);
      `set_worker_credential` binds one (replacing any); `forget_worker_credential` unbinds it
      and says whether one was bound. They concern workers, not jobs: no job need exist.
    - `put_baseline` stores a baseline entry (coordinator/health/baselines.py), replacing the one of the
      same key; `baseline(key)` returns it (None if none); `baselines()` returns all, by key
      (`baselines(after, limit)`: a page of them, after a key).
    - `put_hook_delivery` stores a remediation hook's delivery (coordinator/health/hooks.py),
      replacing the one of the same event id and URL; `hook_deliveries(limit)` returns them newest
      first (by first_at; `limit` 0: all).
    - `add_trend` records one result row's busbw under its baseline key (coordinator/store/trends.py),
      for the fleet and for each host of the point; `trend(query)` returns the buckets of the
      query's step in [since, until) matching its filters (host "": the fleet), ordered by key
      then time, each with the count, mean, min and max; `trend_hours(query)` returns the hours of
      one key (query.key MUST be set, else ValueError) with the job of the lowest result and the
      first jobs of the hour, lowest first. Their cost grows with keys x hours, never with jobs.
      `downsample_trends(now)` bounds them (coordinator/store/trends.py's GRAINS and KEEP_H): the
      rows older than each grain's age merged into one per period at its first hour (counts, sums,
      min, max and the worst job kept), those older than KEEP_H deleted; one call does a bounded
      share and returns whether more is due (call again until False). With deferred commits a
      store may write the share with the next group (PostgreSQL): the call then returns True at
      once, and the next one, once the share is durable, goes on from it.
    - What was written before `close` is there after reopening the same path (SQL store).
    - Durability: a write is durable when its method returns, unless `defer_commits(pending)` was
      called: then writes are grouped, visible at once to this store's reads but durable only
      once `commit()` returns, and `pending()` is called on the first write after each commit,
      so that the owner schedules the next commit (the coordinator: once per turn of its event
      loop, and SubmitJob answers only after it). An implementation with nothing to make durable
      ignores both. `commit()` may instead return a concurrent.futures.Future, done (or failed)
      once the group and every group before it are durable, so the caller need not wait (the
      PostgreSQL store writes each group on a thread of its own).
    - `resident(job_id, request_id)` says whether `get`/`events`/`rank_logs` of that job and
      `job_for_request` of that request id answer without waiting on a server; `prefetch` makes
      them so (the coordinator calls it off its loop first). Local stores: always, and a no-op.
    """

    @abc.abstractmethod
    def create(self, job: pb.Job) -> None: ...

    @abc.abstractmethod
    def get(self, job_id: str) -> pb.Job: ...

    @abc.abstractmethod
    def update(self, job: pb.Job) -> None: ...

    @abc.abstractmethod
    def add_event(self, event: pb.JobEvent) -> None: ...

    @abc.abstractmethod
    def events(self, job_id: str) -> list[pb.JobEvent]: ...

    @abc.abstractmethod
    def add_result(self, job_id: str, result: pb.SizeResult) -> None: ...

    @abc.abstractmethod
    def clear_results(self, job_id: str) -> None: ...

    @abc.abstractmethod
    def set_rank_log(self, job_id: str, rank: int, text: str) -> None: ...

    @abc.abstractmethod
    def rank_logs(self, job_id: str) -> dict[int, str]: ...

    @abc.abstractmethod
    def list(
        self, states: Iterable[int] = (), op: str = "", limit: int = PAGE_DEFAULT, before_id: str = ""
    ) -> list[pb.Job]: ...

    @abc.abstractmethod
    def unfinished(self) -> list[pb.Job]: ...

    @abc.abstractmethod
    def job_for_request(self, request_id: str) -> str: ...

    @abc.abstractmethod
    def set_worker_health(self, worker_id: str, health: pb.WorkerHealth) -> None: ...

    @abc.abstractmethod
    def worker_health(self) -> dict[str, pb.WorkerHealth]: ...

    @abc.abstractmethod
    def worker_credential(self, worker_id: str) -> str: ...

    @abc.abstractmethod
    def set_worker_credential(self, worker_id: str, digest: str) -> None: ...

    @abc.abstractmethod
    def forget_worker_credential(self, worker_id: str) -> bool: ...
    def put_baseline(self, entry: pb.BaselineEntry) -> None: ...

    @abc.abstractmethod
    def baseline(self, key: str) -> pb.BaselineEntry | None: ...

    @abc.abstractmethod
    def baselines(self, after: str = "", limit: int = 0) -> list[pb.BaselineEntry]:
        """By key: those after the key `after` ("": from the first), at most `limit` (0: all)."""

    @abc.abstractmethod
    def put_hook_delivery(self, delivery: pb.HooksDelivery) -> None: ...

    @abc.abstractmethod
    def hook_deliveries(self, limit: int = 0) -> list[pb.HooksDelivery]: ...

    @abc.abstractmethod
    def add_trend(self, point: TrendPoint) -> None: ...

    @abc.abstractmethod
    def trend(self, query: TrendQuery) -> list[TrendBucket]: ...

    @abc.abstractmethod
    def trend_hours(self, query: TrendQuery) -> list[TrendHour]: ...

    @abc.abstractmethod
    def downsample_trends(self, now: float) -> bool: ...

    def defer_commits(self, pending: Callable[[], None]) -> None:  # noqa: B027 - see the contract
        pass

    def resident(self, job_id: str = "", request_id: str = "") -> bool:
        return True

    def prefetch(self, job_id: str = "", request_id: str = "") -> None:  # noqa: B027 - see the contract
        pass

    def commit(self) -> None:  # noqa: B027 - see the contract
        pass

    def close(self) -> None:  # noqa: B027 - optional for stores without resources
        pass


def apply_update(stored: pb.Job, job: pb.Job) -> None:
    """Copy the fields that change over a job's life from `job` into `stored` (in place).

    Only these: state, reason, started_at, finished_at, workers, backend, progress, warm_start,
    and the outcome of non-collective kinds (the table's result fields), stragglers.
    So a caller holding a stale or trimmed Job can never rewrite the spec, created_at or results.
    """
    # Spelled out rather than driven by descriptors: the descriptor API (e.g. `label`) differs
    # between protobuf 6 and 7, and both must work.
    for name in ("state", "reason", "started_at", "finished_at", "backend", "warm_start"):
        setattr(stored, name, getattr(job, name))
    del stored.workers[:]
    stored.workers.extend(job.workers)
    for name in ("progress", "stragglers", *kinds.result_fields()):
        stored.ClearField(name)
        if job.HasField(name):  # an unset message stays unset; CopyFrom would mark it present
            getattr(stored, name).CopyFrom(getattr(job, name))


def store_limit(limit: int) -> int:
    """How many rows `list` returns at most for a requested `limit` (see the contract)."""
    return min(limit, PAGE_MAX + 1) if limit > 0 else PAGE_DEFAULT


def job_op(job: pb.Job) -> str:
    """The op `list` filters on: the collective op, or the job kind (p2p, train, ...)."""
    return op_name(job.spec)
