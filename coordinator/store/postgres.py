"""PostgreSQL JobStore (`--db postgresql://...`): the SQL store on a database that several
coordinators share, one of them leading (coordinator/store/lease.py).

One mechanism, used twice: the queries, the migrations (coordinator/store/schema.py) and the
transaction rules (one transaction per method, writes grouped per turn of the loop by
`defer_commits`) are SqliteJobStore's. They are written in the SQL both dialects agree on; where
SQLite's spelling differs (`?` parameters, `INSERT OR REPLACE`, `WHERE 1`, the DDL types),
`to_postgres` rewrites the statement once (cached), so a query added to the SQLite store works
here too, and the contract suite (tests/unit/test_store_contract.py) runs both.

Nothing waits for the server's disk on the coordinator's loop: with deferred commits, a group's
COMMIT runs on a thread of its own and `commit()` returns a Future (coordinator/store/api.py).
Reads and writes are still answered on the caller's thread: one round trip each on a local socket.

Fencing: with a lease set (`fence_with`), every transaction that wrote checks, just before its
COMMIT, that this coordinator's lease token is still the current, unexpired one, holding the
lease row FOR SHARE so no standby can take the lease over between the check and the commit. A
deposed leader's writes are rolled back and raise `Deposed`.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable

import psycopg
from psycopg.pq import TransactionStatus

from coordinator.store.lease import Deposed, Lease
from coordinator.store.schema import MIGRATIONS
from coordinator.store.sqlite import SqliteJobStore

log = logging.getLogger("ringleader.coordinator")

# The primary key of each table SQLite's `INSERT OR REPLACE` writes (PostgreSQL's upsert names it).
UPSERT_KEYS = {
    "rank_logs": ("job_id", "rank"),
    "worker_credentials": ("worker_id",),
    "worker_health": ("worker_id",),
    "baselines": ("key",),
}
_DDL = [
    (re.compile(r"\bINTEGER PRIMARY KEY AUTOINCREMENT\b"), "BIGSERIAL PRIMARY KEY"),
    (re.compile(r"\bn INTEGER PRIMARY KEY\b"), "n BIGSERIAL PRIMARY KEY"),  # SQLite's rowid alias
    (re.compile(r"\bBLOB\b"), "BYTEA"),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
    (re.compile(r"\)\s*WITHOUT ROWID"), ")"),
]
_REPLACE = re.compile(r"INSERT OR REPLACE INTO (\w+) \(([^)]*)\) VALUES (\([^)]*\))")
_LOCK_MIGRATIONS = 0x72696E67  # pg_advisory_xact_lock key: coordinators starting together migrate one at a time


@functools.lru_cache(maxsize=512)
def to_postgres(sql: str) -> str:
    """The PostgreSQL spelling of one of the SQL store's statements."""
    for pattern, repl in _DDL:
        sql = pattern.sub(repl, sql)
    if m := _REPLACE.search(sql):
        table, cols = m.group(1), [c.strip() for c in m.group(2).split(",")]
        keys = UPSERT_KEYS[table]
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in cols if c not in keys)
        sql = (f"INSERT INTO {table} ({', '.join(cols)}) VALUES {m.group(3)}"
               f" ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {sets}")
    sql = sql.replace("WHERE 1 AND", "WHERE").replace("WHERE 1 ORDER", "ORDER")
    return sql.replace("?", "%s")


class _Connection:
    """The slice of sqlite3.Connection that SqliteJobStore uses, over a psycopg connection in
    autocommit mode (the store's BEGIN/COMMIT are its own), with the lease fence at COMMIT."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.raw = conn
        self.lease: Lease | None = None
        self._wrote = False  # this transaction changed something: its COMMIT is fenced

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != TransactionStatus.IDLE

    def execute(self, sql: str, args: Iterable[Any] = ()) -> psycopg.Cursor:
        word = sql.split(None, 1)[0].upper()
        if word == "COMMIT" and self._wrote and self.lease is not None:
            self._fence(self.lease)
        if word in ("COMMIT", "ROLLBACK", "BEGIN"):
            self._wrote = False
        elif word in ("INSERT", "UPDATE", "DELETE"):
            self._wrote = True
        return self.raw.execute(to_postgres(sql), tuple(args))

    def executemany(self, sql: str, rows: Iterable[Iterable[Any]]) -> None:
        rows = [tuple(r) for r in rows]
        if rows:
            self._wrote = True
            with self.raw.cursor() as cur:
                cur.executemany(to_postgres(sql), rows)

    def _fence(self, lease: Lease) -> None:
        if self.raw.execute(lease.FENCE_SQL, lease.fence_args()).fetchone() is None:
            self.raw.execute("ROLLBACK")
            self._wrote = False
            lease.lost(f"a write was refused: lease token {lease.token} is no longer the leader's")
            raise Deposed(f"deposed: lease token {lease.token} is no longer current; the write was rolled back")


class PostgresJobStore(SqliteJobStore):
    def __init__(self, dsn: str) -> None:  # noqa: super().__init__ is SQLite's file set-up
        self._path = dsn
        self._conn = _Connection(psycopg.connect(dsn, autocommit=True, application_name="ringleader-store"))  # type: ignore[assignment]
        self._lock = threading.Lock()
        self._pending: Callable[[], None] | None = None
        self._checkpoints = None  # PostgreSQL checkpoints itself
        self._committer: ThreadPoolExecutor | None = None  # set by defer_commits
        try:
            self._migrate()
        except BaseException:
            self._conn.raw.close()
            raise

    def fence_with(self, lease: Lease) -> None:
        """From now on, every transaction that writes commits only while `lease` leads."""
        self._conn.lease = lease

    def _migrate(self) -> None:
        with self._tx() as c:
            c.execute("SELECT pg_advisory_xact_lock(?)", (_LOCK_MIGRATIONS,))
            c.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = c.execute("SELECT version FROM schema_version").fetchone()
            version = row[0] if row else 0
            if version > len(MIGRATIONS):
                raise RuntimeError(f"store schema v{version} is newer than this code knows")
            for i in range(version, len(MIGRATIONS)):
                for stmt in MIGRATIONS[i]:
                    c.execute(stmt)
            # Transactional DDL, as in SQLite: a failed migration leaves the old schema and version.
            c.execute("DELETE FROM schema_version")
            c.execute("INSERT INTO schema_version (version) VALUES (?)", (len(MIGRATIONS),))

    def defer_commits(self, pending: Callable[[], None]) -> None:
        with self._lock:
            self._pending = pending
            self._committer = ThreadPoolExecutor(1, thread_name_prefix="postgres-commit")

    def commit(self) -> Future | None:
        """Deferred commits: the group's COMMIT (fence included) waits for the server's disk on the
        committer thread, and the returned Future is done once the group is durable. The lock is
        held until then: a store call made meanwhile waits for that COMMIT instead of joining a
        group that is already closing. Otherwise: commit now, return None."""
        self._lock.acquire()
        if not self._conn.in_transaction:
            self._lock.release()
            return None
        if self._committer is None:
            self._commit_and_release()
            return None
        return self._committer.submit(self._commit_and_release)

    def _commit_and_release(self) -> None:
        try:
            self._conn.execute("COMMIT")
        except psycopg.Error:
            if self._conn.in_transaction:  # never leave a failed group open
                self._conn.execute("ROLLBACK")
            raise
        finally:
            self._lock.release()  # taken by commit(), maybe on another thread

    def close(self) -> None:
        if self._committer is not None:
            self._committer.shutdown(wait=True)  # the last group's COMMIT first
        with self._lock:
            raw = self._conn.raw
            try:
                if not raw.closed and self._conn.in_transaction:
                    self._conn.execute("COMMIT")
            finally:
                raw.close()
