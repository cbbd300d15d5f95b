"""SQLite JobStore: the coordinator's durable record, so jobs survive a coordinator restart.

Messages are stored as serialized protobuf blobs; only the columns that `list`/`unfinished`
filter or order on (submission seq, state, op) and the idempotency key are broken out, so a
proto change needs no schema change. The `update` and `list` rules come from the contract
module, coordinator/store/api.py.

The event loop is never held up by the disk: with `defer_commits` (what the coordinator uses)
writes are grouped into one open transaction until its owner commits (the facade paces it:
coordinator/shell/facade.py, COMMIT_EVERY_S), and WAL checkpoints, the only step that waits for
fsync in WAL mode with synchronous=NORMAL, run on a thread of their own (sqlite_checkpoint.py).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import Callable, Iterable, Iterator

from coordinator.store.api import UNFINISHED, JobStore, apply_update, job_op, store_limit
from coordinator.store.resident import Resident
from coordinator.store.schema import MIGRATIONS
from coordinator.store.seen import Seen
from coordinator.store.sqlite_checkpoint import Checkpoints
from coordinator.store.sqlite_health import SqliteBaselines, SqliteCredentials, SqliteHookLog, SqliteWorkerHealth
from coordinator.store.sqlite_trends import SqliteTrends
from ringleader.defaults import PAGE_DEFAULT
from ringleader.errors import AlreadyExists, NotFound
from ringleader.v1 import jobs_pb2 as pb


class SqliteJobStore(SqliteHookLog, SqliteBaselines, SqliteWorkerHealth, SqliteCredentials, SqliteTrends, JobStore):
    _requests_seen: Seen | None = None  # the request ids stored (one writer a file), loaded at the first ask

    def __init__(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: the module never opens transactions behind our back; _tx opens
        # exactly one per public method, reads included, so each sees a consistent snapshot.
        # check_same_thread=False plus the lock: the event loop thread is the only caller by
        # design, but a helper thread calling in must be serialized, not corrupt the connection.
        self._path = str(path)
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        self._pending: Callable[[], None] | None = None  # set by defer_commits
        self._checkpoints: Checkpoints | None = None
        self._resident = Resident()  # unfinished jobs as written: no read-back (resident.py says why)
        try:
            # WAL: readers (a CLI peeking at the file) do not block the coordinator's writes.
            # NORMAL is durable across process crashes in WAL mode; only an OS crash may lose
            # the last commits, acceptable for benchmark records.
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    def _migrate(self) -> None:
        with self._tx() as c:
            version = c.execute("PRAGMA user_version").fetchone()[0]
            if version > len(MIGRATIONS):
                raise RuntimeError(f"store schema v{version} is newer than this code knows")
            for i in range(version, len(MIGRATIONS)):
                for stmt in MIGRATIONS[i]:
                    c.execute(stmt)
            # DDL and user_version are transactional in SQLite: a failed migration leaves the
            # old schema and old version together.
            c.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")

    @contextlib.contextmanager
    def _tx(self, write: bool = False, one: bool = False) -> Iterator[sqlite3.Connection]:
        """One transaction per public method; with deferred commits, a write joins the open
        group (under a savepoint, so a failed method leaves nothing behind) and stays uncommitted.
        `one`: the method changes the database in one statement, which undoes itself when it
        fails: no savepoint. Why it matters: the sqlite3 module lets go of the GIL in every
        statement, and while the gRPC edge thread wants it, taking it back can wait out a switch
        interval (5 ms): 5.8 us per update alone on the 2-core development machine, 1.4 ms beside
        a busy thread. A savepoint is two statements more."""
        with self._lock:
            c = self._conn
            if c.in_transaction:  # the open group of deferred writes
                if not write or one:
                    yield c
                    return
                c.execute("SAVEPOINT op")
                try:
                    yield c
                except BaseException:
                    c.execute("ROLLBACK TO op")
                    raise
                finally:
                    c.execute("RELEASE op")
                return
            c.execute("BEGIN")
            try:
                yield c
            except BaseException:
                c.execute("ROLLBACK")
                raise
            if write and self._pending is not None:
                self._pending()  # a new group: its owner will commit it
            else:
                c.execute("COMMIT")

    def defer_commits(self, pending: Callable[[], None]) -> None:
        with self._lock:
            self._pending = pending
            self._conn.execute("PRAGMA wal_autocheckpoint = 0")  # a thread does them (sqlite_checkpoint.py)
        self._checkpoints = Checkpoints(self._path)

    def commit(self) -> None:
        with self._lock:
            if not self._conn.in_transaction:
                return
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error:
                # Never leave the failed group open: the next write must start (and announce) one.
                self._resident.clear()  # (it held the group's writes)
                self._credentials = None  # the same: read again at the next use
                self._baselines_kept = None  # the same
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    def close(self) -> None:
        if self._checkpoints:
            self._checkpoints.stop()
            self._checkpoints = None
        with self._lock:
            try:
                if self._conn.in_transaction:
                    self._conn.execute("COMMIT")
            except sqlite3.ProgrammingError:
                pass  # closed before
            self._conn.close()  # idempotent

    @staticmethod
    def _seq_of(c: sqlite3.Connection, job_id: str) -> int:
        row = c.execute("SELECT seq FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotFound(f"job {job_id} not found")
        return row[0]

    @staticmethod
    def _insert_of(c: sqlite3.Connection, job_id: str, sql: str, args: tuple) -> None:
        """A row of job `job_id`'s (its foreign key): NotFound when there is no such job, told
        by the key itself rather than a SELECT first (one statement: see _tx)."""
        try:
            c.execute(sql, args)
        except sqlite3.IntegrityError as exc:
            if "FOREIGN KEY" not in str(exc):
                raise
            raise NotFound(f"job {job_id} not found") from None

    def _load(self, c: sqlite3.Connection, job_id: str, with_results: bool) -> pb.Job:
        job = self._resident.get(job_id)
        if job is None:
            row = c.execute("SELECT job FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise NotFound(f"job {job_id} not found")
            job = pb.Job.FromString(row[0])
        if with_results:
            rows = c.execute(
                "SELECT blob FROM results WHERE job_id = ? ORDER BY idx", (job_id,)
            ).fetchall()
            job.results.extend(pb.SizeResult.FromString(r[0]) for r in rows)
        return job

    def create(self, job: pb.Job) -> None:
        stored = pb.Job()
        stored.CopyFrom(job)
        stored.ClearField("results")  # results live in their own table
        # A job comes with results only from an import: otherwise its row is the one write, and
        # the keys of its id and request id tell a repeat (one statement, no savepoint: _tx says
        # why that matters).
        with self._tx(write=True, one=not job.results) as c:
            try:
                c.execute(
                    "INSERT INTO jobs (id, state, op, created_at, job, request_id) VALUES (?, ?, ?, ?, ?, ?)",
                    (job.id, job.state, job_op(job), job.created_at, stored.SerializeToString(),
                     job.request_id or None),
                )
            except sqlite3.IntegrityError as exc:
                if "jobs.id" in str(exc):
                    raise AlreadyExists(f"job {job.id} already exists") from None
                if job.request_id and (other := self._for_request(c, job.request_id)):
                    raise AlreadyExists(f"request {job.request_id} already created job {other}") from None
                raise
            if job.request_id and self._requests_seen is not None:
                self._requests_seen.add(job.request_id)
            if job.results:
                c.executemany(
                    "INSERT INTO results (job_id, idx, blob) VALUES (?, ?, ?)",
                    [(job.id, i, r.SerializeToString()) for i, r in enumerate(job.results)],
                )
        self._resident.put(stored)

    def get(self, job_id: str) -> pb.Job:
        with self._tx() as c:
            return self._load(c, job_id, with_results=True)

    def update(self, job: pb.Job) -> None:
        with self._tx(write=True, one=True) as c:
            stored = self._load(c, job.id, with_results=False)
            apply_update(stored, job)
            c.execute(
                "UPDATE jobs SET state = ?, job = ? WHERE id = ?",
                (stored.state, stored.SerializeToString(), job.id),
            )
        self._resident.put(stored)

    def add_event(self, event: pb.JobEvent) -> None:
        with self._tx(write=True, one=True) as c:
            self._insert_of(c, event.job_id, "INSERT INTO events (job_id, seq, blob) VALUES (?, ?, ?)",
                            (event.job_id, event.seq, event.SerializeToString()))

    def events(self, job_id: str) -> list[pb.JobEvent]:
        with self._tx() as c:
            self._seq_of(c, job_id)
            rows = c.execute(
                "SELECT blob FROM events WHERE job_id = ? ORDER BY n", (job_id,)
            ).fetchall()
        return [pb.JobEvent.FromString(r[0]) for r in rows]

    def add_result(self, job_id: str, result: pb.SizeResult) -> None:
        with self._tx(write=True, one=True) as c:
            self._insert_of(c, job_id, "INSERT INTO results (job_id, idx, blob) SELECT ?, COALESCE(MAX(idx) + 1, 0), ?"
                            " FROM results WHERE job_id = ?", (job_id, result.SerializeToString(), job_id))

    def clear_results(self, job_id: str) -> None:
        with self._tx(write=True) as c:
            self._seq_of(c, job_id)
            c.execute("DELETE FROM results WHERE job_id = ?", (job_id,))

    def set_rank_log(self, job_id: str, rank: int, text: str) -> None:
        with self._tx(write=True, one=True) as c:
            self._insert_of(c, job_id, "INSERT OR REPLACE INTO rank_logs (job_id, rank, text) VALUES (?, ?, ?)",
                            (job_id, rank, text))

    def rank_logs(self, job_id: str) -> dict[int, str]:
        with self._tx() as c:
            self._seq_of(c, job_id)
            rows = c.execute("SELECT rank, text FROM rank_logs WHERE job_id = ? ORDER BY rank", (job_id,)).fetchall()
        return dict(rows)

    def list(
        self, states: Iterable[int] = (), op: str = "", limit: int = PAGE_DEFAULT, before_id: str = ""
    ) -> list[pb.Job]:
        wanted = sorted({int(s) for s in states})
        where, args = ["1"], []
        with self._tx() as c:
            if before_id:
                where.append("seq < ?")
                args.append(self._seq_of(c, before_id))
            if wanted:
                where.append(f"state IN ({', '.join('?' * len(wanted))})")
                args.extend(wanted)
            if op:
                where.append("op = ?")
                args.append(op)
            rows = c.execute(
                f"SELECT job FROM jobs WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?",
                (*args, store_limit(limit)),
            ).fetchall()
        return [pb.Job.FromString(r[0]) for r in rows]

    def job_for_request(self, request_id: str) -> str:
        """A new request id (nearly every submit's) is told by a filter of the stored ones: no read."""
        if not (self._requests_seen or self._load_requests_seen()).maybe(request_id):
            return ""
        with self._tx() as c:
            return self._for_request(c, request_id)

    def _load_requests_seen(self) -> Seen:
        seen = Seen()
        for request_id in self.request_ids():
            seen.add(request_id)
        self._requests_seen = seen
        return seen

    @staticmethod
    def _for_request(c: sqlite3.Connection, request_id: str) -> str:
        row = c.execute("SELECT id FROM jobs WHERE request_id = ?", (request_id,)).fetchone()
        return row[0] if row else ""

    def request_ids(self) -> list[str]:
        """Every job's request id (a write-behind store's start-up load)."""
        with self._tx() as c:
            return [r[0] for r in c.execute("SELECT request_id FROM jobs WHERE request_id IS NOT NULL").fetchall()]

    def unfinished(self) -> list[pb.Job]:
        with self._tx() as c:
            ids = c.execute(
                "SELECT id FROM jobs WHERE state IN (?, ?) ORDER BY seq", UNFINISHED
            ).fetchall()
            return [self._load(c, r[0], with_results=True) for r in ids]
