"""The PostgreSQL store's writes (coordinator/store/postgres.py), on a thread and a connection of
their own, so nothing waits for the server on the coordinator's loop. Group commit: the groups
(one per turn of the loop) handed over while the last transaction was committing are written
together as the next one, in the order they came, sent in pipeline mode (BEGIN, the statements
and the fence in one round trip, COMMIT in a second), so the server's disk is waited for once per
transaction however many turns it holds. A transaction that fails fails every group in it.

Fencing: with a lease set (`lease`), every group checks, just before its COMMIT, that this
coordinator's lease token is still the current, unexpired one, holding the lease row FOR SHARE
so no standby can take the lease over between the check and the commit. A deposed leader's
group is rolled back and raises `Deposed`.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

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
        self._queue: list[tuple[list[Op], Future]] = []
        self._wake = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="postgres-writer", daemon=True)
        self._thread.start()

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True, application_name="ringleader-writer")

    def write(self, ops: list[Op]) -> Future:
        """Write `ops` after every group handed over before; the Future is done once they are
        durable (or failed)."""
        done: Future = Future()
        with self._wake:
            if self._closing:
                raise RuntimeError("the store's writer is closed")
            self._queue.append((ops, done))
            self._wake.notify()
        return done

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._closing:
                    self._wake.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            try:
                self._write(merged(ops for ops, _ in batch))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the groups
                for _, done in batch:
                    done.set_exception(exc)
            else:
                for _, done in batch:
                    done.set_result(None)

    def _write(self, ops: list[Op]) -> None:
        if self._conn.closed or self._conn.broken:  # the last transaction lost its connection: a new one
            self._conn = self._connect()
        conn = self._conn
        with conn.pipeline(), conn.transaction(), conn.cursor() as cur:  # COMMIT at the end, or ROLLBACK
            for sql, rows in ops:
                cur.executemany(to_postgres(sql), rows)
            if self.lease is not None:
                self._fence(cur, self.lease)

    @staticmethod
    def _fence(cur: psycopg.Cursor, lease: Lease) -> None:
        if cur.execute(lease.FENCE_SQL, lease.fence_args()).fetchone() is None:
            lease.lost(f"a write was refused: lease token {lease.token} is no longer the leader's")
            raise Deposed(f"deposed: lease token {lease.token} is no longer current; the write was rolled back")

    def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join()  # the groups handed over first
        self._conn.close()


def merged(groups) -> list[Op]:
    """The groups' statements in order, a run of the same statement as one executemany."""
    out: list[Op] = []
    for ops in groups:
        for sql, rows in ops:
            if out and out[-1][0] == sql:
                out[-1] = (sql, out[-1][1] + rows)
            else:
                out.append((sql, rows))
    return out
