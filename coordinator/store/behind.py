"""The write-behind store: what the coordinator's loop reads and writes is memory; a writer
thread makes it durable. PostgreSQL's store (coordinator/store/postgres.py) is this store on its
own record and writer.

Nothing on the coordinator's loop waits for the database. The store answers from memory (the
in-memory store's own code, MemoryJobStore) for what the coordinator works on: every unfinished
job, the jobs it wrote or read lately (the last HOT_FINISHED finished ones), worker verdicts and
credentials, baselines, all loaded when it opens. Each write changes memory at once, then joins
the open group of statements; `commit()` hands the group to the writer
(coordinator/store/group_writer.py: one transaction, one batch, on its own thread and
connection) and returns a Future done once it is durable, which SubmitJob awaits before it
answers. A finished job is dropped from memory only once its writes are durable; later reads of
it (and listings, trends) go to the database through the record (the SQL store's own queries,
coordinator/store/sqlite.py, on a connection of its own). Listings and trends first wait for the
groups already written, so they show every write made before them. Trends are downsampled by the
writer, a share with a group (coordinator/store/behind_trends.py). `resident()` tells whether a
read would go to the database; `prefetch()` does that read, off the loop, beforehand
(coordinator/shell/facade.py). A request id never seen (coordinator/store/seen.py) needs no read.

The one rule that differs: `create` fails at once (AlreadyExists) for an id or request id in
memory; one known only to the database (an old job) is refused by its unique index at commit,
which fails the group, so the submit is not acknowledged.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from typing import Callable, Iterable

from coordinator.store.api import job_op
from coordinator.store.memory import MemoryJobStore, _copy
from coordinator.store.behind_fleet import BehindFleet
from coordinator.store.behind_trends import BehindTrends
from coordinator.store.hook_log import MemoryHookLog
from coordinator.store.group_writer import GroupWriter, Op, Share
from coordinator.store.seen import Seen
from coordinator.store.sqlite import SqliteJobStore
from ringleader import states as job_states
from ringleader.defaults import PAGE_DEFAULT
from ringleader.errors import NotFound
from ringleader.v1 import jobs_pb2 as pb

HOT_FINISHED = 10_000  # finished jobs kept in memory (once durable) before the oldest are dropped
ABSENT_MAX = 10_000  # ids and request ids the database was asked about and does not have


class WriteBehindStore(BehindFleet, BehindTrends, MemoryJobStore):
    """`record`: the database's reads (an SqliteJobStore, or one on PostgreSQL), never deferred;
    `open_writer()`: the writer, opened once the record has migrated the schema."""

    def __init__(self, record: SqliteJobStore, open_writer: Callable[[], GroupWriter]) -> None:
        super().__init__()
        self._mem = threading.RLock()  # memory: the loop writes it, prefetch threads and the writer read it
        self._record = record
        try:
            self._writer = open_writer()
        except BaseException:
            record.close()
            raise
        self._ops: list[Op] = []  # the open group
        self._pending: Callable[[], None] | None = None
        self._last: Future | None = None  # the last group handed to the writer
        self._group, self._durable = 1, 0  # the open group's number; the last durable one
        self._dirty: dict[str, int] = {}  # job id -> the group of its last write
        self._finished: deque[str] = deque()  # finished jobs in memory, oldest first
        self._absent_jobs: set[str] = set()
        self._absent_requests: set[str] = set()
        self._seen = Seen()  # every request id of a job: a new one needs no read from the database
        self._load()

    def _load(self) -> None:
        r = self._record
        for job in r.unfinished():
            self._remember(job, r.events(job.id), r.rank_logs(job.id))
        self._health = r.worker_health()
        self._credentials = r.worker_credentials()
        self._baselines = {e.key: e for e in r.baselines()}
        self._hook_log = MemoryHookLog({(d.event_id, d.url): d for d in r.hook_deliveries()})
        for request_id in r.request_ids():
            self._seen.add(request_id)

    def _remember(self, job: pb.Job, events: list[pb.JobEvent], logs: dict[int, str]) -> None:
        """Put a job read from the database into memory, as `create` would have left it."""
        stored = _copy(job)
        self._results[job.id] = list(stored.results)
        stored.ClearField("results")
        self._seq += 1
        self._order[job.id], self._jobs[job.id] = self._seq, stored
        self._events[job.id], self._logs[job.id] = events, dict(logs)
        if job.request_id:
            self._requests[job.request_id] = job.id
        if job_states.is_terminal(job.state):
            self._finished.append(job.id)

    def _warm(self, job_id: str) -> None:
        """Have `job_id` in memory (NotFound if the database does not know it either)."""
        with self._mem:
            if job_id in self._jobs:
                return
            if job_id in self._absent_jobs:
                raise NotFound(f"job {job_id} not found")
        r = self._record  # not in memory: nothing of it is waiting to be written
        job, events, logs = r.get(job_id), r.events(job_id), r.rank_logs(job_id)
        with self._mem:
            if job_id not in self._jobs:
                self._remember(job, events, logs)

    # ---- reads the coordinator's loop may wait for ---------------------------------------------

    def resident(self, job_id: str = "", request_id: str = "") -> bool:
        with self._mem:
            return ((not job_id or job_id in self._jobs or job_id in self._absent_jobs)
                    and (not request_id or request_id in self._requests or request_id in self._absent_requests
                         or not self._seen.maybe(request_id)))

    def prefetch(self, job_id: str = "", request_id: str = "") -> None:
        if request_id:
            self.job_for_request(request_id)
        if job_id:
            try:
                self._warm(job_id)
            except NotFound:
                self._absent(self._absent_jobs, job_id)

    def _absent(self, known_absent: set[str], key: str) -> None:
        with self._mem:
            if len(known_absent) >= ABSENT_MAX:
                known_absent.clear()
            known_absent.add(key)

    # ---- writes: memory at once, the database with the group -------------------------------------

    def _write(self, job_id: str, sql: str | Share, *rows: tuple) -> None:
        """Add a statement (or a Share) to the open group (the caller holds _mem and has changed memory)."""
        first = not self._ops
        if self._ops and self._ops[-1][0] == sql:
            self._ops[-1][1].extend(rows)  # one executemany for a run of the same statement
        else:
            self._ops.append((sql, list(rows)))
        if job_id:
            self._dirty[job_id] = self._group
        if first and self._pending is not None:
            self._pending()

    def _written(self) -> None:
        """After a write: durable now unless commits are deferred (the contract)."""
        if self._pending is None:
            self._sync()

    def create(self, job: pb.Job) -> None:
        with self._mem:
            super().create(job)
            self._absent_jobs.discard(job.id)
            self._absent_requests.discard(job.request_id)
            if job.request_id:
                self._seen.add(job.request_id)
            stored = self._jobs[job.id]
            self._write(job.id, "INSERT INTO jobs (id, state, op, created_at, job, request_id) VALUES (?, ?, ?, ?, ?, ?)",
                        (job.id, job.state, job_op(job), job.created_at, stored.SerializeToString(), job.request_id or None))
            for i, r in enumerate(self._results[job.id]):
                self._write(job.id, "INSERT INTO results (job_id, idx, blob) VALUES (?, ?, ?)", (job.id, i, r.SerializeToString()))
        self._written()

    def update(self, job: pb.Job) -> None:
        self._warm(job.id)
        with self._mem:
            super().update(job)
            stored = self._jobs[job.id]
            self._write(job.id, "UPDATE jobs SET state = ?, job = ? WHERE id = ?",
                        (stored.state, stored.SerializeToString(), job.id))
            if job_states.is_terminal(stored.state):
                self._finished.append(job.id)
        self._written()

    def add_event(self, event: pb.JobEvent) -> None:
        self._warm(event.job_id)
        with self._mem:
            super().add_event(event)
            self._write(event.job_id, "INSERT INTO events (job_id, seq, blob) VALUES (?, ?, ?)",
                        (event.job_id, event.seq, event.SerializeToString()))
        self._written()

    def add_result(self, job_id: str, result: pb.SizeResult) -> None:
        self._warm(job_id)
        with self._mem:
            super().add_result(job_id, result)
            self._write(job_id, "INSERT INTO results (job_id, idx, blob) VALUES (?, ?, ?)",
                        (job_id, len(self._results[job_id]) - 1, result.SerializeToString()))
        self._written()

    def clear_results(self, job_id: str) -> None:
        self._warm(job_id)
        with self._mem:
            super().clear_results(job_id)
            self._write(job_id, "DELETE FROM results WHERE job_id = ?", (job_id,))
        self._written()

    def set_rank_log(self, job_id: str, rank: int, text: str) -> None:
        self._warm(job_id)
        with self._mem:
            super().set_rank_log(job_id, rank, text)
            self._write(job_id, "INSERT OR REPLACE INTO rank_logs (job_id, rank, text) VALUES (?, ?, ?)",
                        (job_id, rank, text))
        self._written()

    # ---- reads -------------------------------------------------------------------------------

    def get(self, job_id: str) -> pb.Job:
        self._warm(job_id)
        with self._mem:
            return super().get(job_id)

    def events(self, job_id: str) -> list[pb.JobEvent]:
        self._warm(job_id)
        with self._mem:
            return super().events(job_id)

    def rank_logs(self, job_id: str) -> dict[int, str]:
        self._warm(job_id)
        with self._mem:
            return super().rank_logs(job_id)

    def job_for_request(self, request_id: str) -> str:
        with self._mem:
            if request_id in self._requests or request_id in self._absent_requests or not self._seen.maybe(request_id):
                return self._requests.get(request_id, "")
        known = self._record.job_for_request(request_id)
        if known:
            self._warm(known)
        else:
            self._absent(self._absent_requests, request_id)
        return known

    def unfinished(self) -> list[pb.Job]:
        with self._mem:  # every unfinished job is in memory
            return super().unfinished()

    def list(self, states: Iterable[int] = (), op: str = "", limit: int = PAGE_DEFAULT,
             before_id: str = "") -> list[pb.Job]:
        self._sync()
        return self._record.list(states, op, limit, before_id)

    # ---- groups ------------------------------------------------------------------------------

    def defer_commits(self, pending: Callable[[], None]) -> None:
        with self._mem:
            self._pending = pending

    def commit(self) -> Future | None:
        """Hand the open group to the writer; the Future is done once it (and every group before
        it) is durable. None when nothing is waiting to be written."""
        with self._mem:
            later = self._hand_over()
            self._evict()
        return later

    def _hand_over(self) -> Future | None:
        """The group handed over now, done or not (one refused before this returned was once
        None, and the facade acknowledged it); else the last one still being written, or None."""
        if self._ops:
            ops, self._ops, group = self._ops, [], self._group
            self._group += 1
            self._last = self._writer.write(ops)
            self._last.add_done_callback(lambda f: self._done(group, f))
            return self._last
        return self._last if self._last is not None and not self._last.done() else None

    def _done(self, group: int, f: Future) -> None:
        if f.exception() is None:
            with self._mem:
                self._durable = max(self._durable, group)

    def _sync(self) -> None:
        """Return once every write made so far is durable (raises what the writer raised)."""
        with self._mem:
            later = self._hand_over()
            self._evict()
        if later is not None:
            later.result()

    def _evict(self) -> None:
        """Drop the oldest finished jobs beyond HOT_FINISHED whose writes are durable."""
        while len(self._finished) > HOT_FINISHED:
            job_id = self._finished[0]
            if self._dirty.get(job_id, 0) > self._durable:
                return
            self._finished.popleft()
            job = self._jobs.pop(job_id, None)
            for book in (self._order, self._results, self._events, self._logs, self._dirty):
                book.pop(job_id, None)
            if job is not None and job.request_id:
                self._requests.pop(job.request_id, None)

    def close(self) -> None:
        try:
            self._sync()
        finally:
            self._writer.close()
            self._record.close()
