"""Contracts of the coordinator's parts. Read this before any implementation."""

from __future__ import annotations

import abc
from typing import Iterable

from ringleader.v1 import jobs_pb2 as pb


class JobStore(abc.ABC):
    """Durable record of jobs, their specs, state changes (events) and results.

    Contract (tests/unit/test_store_contract.py runs it against every implementation):
    - `create` MUST fail with AlreadyExists if the id is known; it records the submission order.
    - `get`, `update`, `add_event`, `add_result`, `clear_results` MUST fail with NotFound if
      the job is unknown.
    - `get` returns the job with its results in the order they were added.
    - `update` replaces only the fields that change over a job's life (state, reason,
      started_at, finished_at, workers, backend, progress, warm_start, and the outcome of
      non-collective kinds: p2p, gradient_average, train); it keeps the stored spec
      and created_at and ignores the given Job's results (see add_result/clear_results).
    - `list` returns newest first, without results, filtered by states (any of; empty: all) and
      op (the collective op, or the job kind for other kinds; empty: all), at most `limit` (0: 50; capped at 1000), only jobs
      submitted before `before_id` when it is given (NotFound if that id is unknown).
    - `unfinished` returns QUEUED and RUNNING jobs in submission order (oldest first), with
      their results as `get` returns them.
    - `events` returns a job's events in the order they were added (NotFound if unknown).
    - What was written before `close` is there after reopening the same path (SQL store).
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
    def list(
        self, states: Iterable[int] = (), op: str = "", limit: int = 50, before_id: str = ""
    ) -> list[pb.Job]: ...

    @abc.abstractmethod
    def unfinished(self) -> list[pb.Job]: ...

    def close(self) -> None:  # noqa: B027 - optional for stores without resources
        pass


def open_store(url: str) -> JobStore:
    """Factory: ':memory:' gives the in-memory store, anything else is an SQLite path."""
    if url == ":memory:":
        from coordinator.store_memory import MemoryJobStore

        return MemoryJobStore()
    from coordinator.store_sqlite import SqliteJobStore

    return SqliteJobStore(url)
