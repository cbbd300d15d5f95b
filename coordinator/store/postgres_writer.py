"""The PostgreSQL store's writes (coordinator/store/postgres.py): each group of statements (one turn
of the coordinator's loop) is one transaction, sent in pipeline mode (one batch, not a round trip
per statement) on a thread and a connection of its own, so nothing waits for the server on the
loop. Groups are written in the order they were handed over.

Fencing: with a lease set (`lease`), every group checks, just before its COMMIT, that this
coordinator's lease token is still the current, unexpired one, holding the lease row FOR SHARE
so no standby can take the lease over between the check and the commit. A deposed leader's
group is rolled back and raises `Deposed`.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import psycopg

from coordinator.store.lease import Deposed, Lease
from coordinator.store.postgres_record import to_postgres

# One statement of a group, with the rows it is run for (in order).
Op = tuple[str, list[tuple]]


class GroupWriter:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.lease: Lease | None = None
        self._conn = self._connect()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="postgres-writer")

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True, application_name="ringleader-writer")

    def write(self, ops: list[Op]) -> Future:
        """Write `ops` as one transaction; the Future is done once it is durable (or failed)."""
        return self._thread.submit(self._write, ops)

    def _write(self, ops: list[Op]) -> None:
        if self._conn.closed or self._conn.broken:  # the last group lost its connection: a new one
            self._conn = self._connect()
        conn = self._conn
        with conn.transaction():  # COMMIT at the end, ROLLBACK if anything below raises
            with conn.pipeline(), conn.cursor() as cur:
                for sql, rows in ops:
                    cur.executemany(to_postgres(sql), rows)
            if self.lease is not None:
                self._fence(conn, self.lease)

    @staticmethod
    def _fence(conn: psycopg.Connection, lease: Lease) -> None:
        if conn.execute(lease.FENCE_SQL, lease.fence_args()).fetchone() is None:
            lease.lost(f"a write was refused: lease token {lease.token} is no longer the leader's")
            raise Deposed(f"deposed: lease token {lease.token} is no longer current; the write was rolled back")

    def close(self) -> None:
        self._thread.shutdown(wait=True)  # the groups handed over first
        self._conn.close()
