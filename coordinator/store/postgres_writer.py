"""The PostgreSQL store's writes (coordinator/store/postgres.py), on a thread and a connection of
their own, so nothing waits for the server on the coordinator's loop. Group commit: the groups
(one per turn of the loop) handed over while the last transaction was committing are written
together as the next one, in the order they came, sent in pipeline mode (BEGIN, the statements
the fence and COMMIT in one round trip), so the server's disk is waited for once per
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
from psycopg.pq import TransactionStatus

from coordinator.store.lease import Deposed, Lease
from coordinator.store.postgres_record import to_postgres

# The fence as a statement that fails (division by zero) unless this lease still leads, holding
# its row FOR SHARE until COMMIT: no round trip of its own, and the COMMIT after it never runs.
FENCE_OR_FAIL = "SELECT 1 / (SELECT count(*) FROM ({fence}) AS held)::int"

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
        conn, lease = self._conn, self.lease
        try:
            with conn.pipeline(), conn.cursor() as cur:  # one round trip: sent together, synced at the end
                cur.execute("BEGIN")
                for sql, rows in ops:
                    cur.executemany(to_postgres(sql), rows)
                if lease is not None:
                    cur.execute(FENCE_OR_FAIL.format(fence=lease.FENCE_SQL), lease.fence_args())
                cur.execute("COMMIT")  # skipped by the server after any error above
        except BaseException as exc:
            if not conn.broken and conn.info.transaction_status != TransactionStatus.IDLE:
                conn.execute("ROLLBACK")
            if lease is not None and isinstance(exc, psycopg.errors.DivisionByZero):
                lease.lost(f"a write was refused: lease token {lease.token} is no longer the leader's")
                raise Deposed(f"deposed: lease token {lease.token} is no longer current; "
                              "the write was rolled back") from exc
            raise

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
