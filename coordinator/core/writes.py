"""The store as the control core sees it: its writes are kept, in order, and leave with the
input's Out (`Out.writes`) for the shell (facade.Coordinator) to apply after the input, before
it sends anything; the core never writes the store itself.

Reads are answered from the store, and none is made inside an input but these, each argued:
- `events(job_id)`: the next event number of a job this process did not create, once per job
  (the jobs reloaded after a restart);
- `baseline(key)`: a result row's baseline, read as the row is stored (its ratio and the job's
  regressions are part of the same input); a baseline written earlier in the same input is
  answered from the writes kept;
- `get(job_id)`: to name the error of a cancel of a job neither queued nor running, and the
  members of a job ended long ago whose rank reports late (JobBook.members).
Everything else read outside an input (GetJob, a list, a watch's stored events) reads the store
as before, after the shell applied the writes of every input so far.
"""

from __future__ import annotations

from typing import Any

from coordinator.store.api import JobStore
from ringleader.v1 import jobs_pb2 as pb

Write = tuple[str, tuple]  # (the JobStore method, its arguments)


class Writes:
    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._kept: list[Write] = []
        self._baselines: dict[str, pb.BaselineEntry] = {}  # written since the last drain

    # ---- writes: kept -------------------------------------------------------------------------

    def create(self, job: pb.Job) -> None:
        self._kept.append(("create", (job,)))

    def update(self, job: pb.Job) -> None:
        self._kept.append(("update", (job,)))

    def add_event(self, event: pb.JobEvent) -> None:
        self._kept.append(("add_event", (event,)))

    def add_result(self, job_id: str, result: pb.SizeResult) -> None:
        self._kept.append(("add_result", (job_id, result)))

    def clear_results(self, job_id: str) -> None:
        self._kept.append(("clear_results", (job_id,)))

    def set_rank_log(self, job_id: str, rank: int, text: str) -> None:
        self._kept.append(("set_rank_log", (job_id, rank, text)))

    def add_trend(self, point: Any) -> None:
        self._kept.append(("add_trend", (point,)))

    def set_worker_health(self, worker_id: str, health: pb.WorkerHealth) -> None:
        self._kept.append(("set_worker_health", (worker_id, health)))

    def put_baseline(self, entry: pb.BaselineEntry) -> None:
        self._baselines[entry.key] = entry
        self._kept.append(("put_baseline", (entry,)))

    def drain(self) -> list[Write]:
        """The writes kept since the last call, in order."""
        kept, self._kept, self._baselines = self._kept, [], {}
        return kept

    # ---- reads: the store's -------------------------------------------------------------------

    def baseline(self, key: str) -> pb.BaselineEntry | None:
        if (e := self._baselines.get(key)) is not None:
            return e
        return self.store.baseline(key)

    def __getattr__(self, name: str):
        return getattr(self.store, name)  # the reads (get, events, list, unfinished, worker_health, ...)


def apply(writes: list[Write], store: JobStore) -> None:
    """The shell's half: the writes an input made, on the store, in order."""
    for method, args in writes:
        getattr(store, method)(*args)
