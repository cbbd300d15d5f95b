"""The SQL of the PostgreSQL store (coordinator/store/postgres.py): SqliteJobStore's queries on a
PostgreSQL connection, one transaction per call, for what the store reads from the server (its
start-up load, jobs no longer in memory, listings, trends) and the migrations.

One mechanism, used twice: the queries and the migrations (coordinator/store/schema.py) are
SqliteJobStore's. They are written in the SQL both dialects agree on; where SQLite's spelling
differs (`?` parameters, `INSERT OR REPLACE`, `WHERE 1`, the DDL types), `to_postgres` rewrites
the statement once (cached), so a query added to the SQLite store works here too. The writes go
through coordinator/store/postgres_writer.py, a group per turn of the coordinator's loop.
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Any, Iterable

import psycopg
from psycopg.pq import TransactionStatus

from coordinator.store.resident import Resident
from coordinator.store.schema import MIGRATIONS
from coordinator.store.sqlite import SqliteJobStore

# The primary key of each table SQLite's `INSERT OR REPLACE` writes (PostgreSQL's upsert names it).
UPSERT_KEYS = {
    "rank_logs": ("job_id", "rank"),
    "worker_credentials": ("worker_id",),
    "worker_health": ("worker_id",),
    "baselines": ("key",),
    "hook_deliveries": ("event_id", "url"),
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
    autocommit mode (the store's BEGIN/COMMIT are its own)."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.raw = conn

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != TransactionStatus.IDLE

    def execute(self, sql: str, args: Iterable[Any] = ()) -> psycopg.Cursor:
        return self.raw.execute(to_postgres(sql), tuple(args))

    def executemany(self, sql: str, rows: Iterable[Iterable[Any]]) -> None:
        rows = [tuple(r) for r in rows]
        if rows:
            with self.raw.cursor() as cur:
                cur.executemany(to_postgres(sql), rows)


class PostgresRecord(SqliteJobStore):
    def __init__(self, dsn: str) -> None:  # noqa: super().__init__ is SQLite's file set-up
        self._path = dsn
        self._conn = _Connection(psycopg.connect(dsn, autocommit=True, application_name="ringleader-store"))  # type: ignore[assignment]
        self._lock = threading.Lock()
        self._pending = None  # never deferred: each call is its own transaction
        self._checkpoints = None  # PostgreSQL checkpoints itself
        self._resident = Resident()  # stays empty: the writes go through the group writer
        try:
            self._migrate()
        except BaseException:
            self._conn.raw.close()
            raise

    def job_for_request(self, request_id: str) -> str:
        """Always read: other coordinators write here too (the write-behind store filters)."""
        with self._tx() as c:
            return self._for_request(c, request_id)

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

    def close(self) -> None:
        with self._lock:
            self._conn.raw.close()
