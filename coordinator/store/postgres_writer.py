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

A group may also carry a `Share`: the store's own upkeep (the trends' downsampling) that needs the
server's answers as it goes. It runs in the group's transaction, after the group's statements and
before the fence, so it is fenced as they are and takes the writer's turn like any group; a
savepoint keeps its failure its own, so a bad share never fails the writes beside it.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any, Callable

import psycopg
from psycopg.pq import TransactionStatus

from coordinator.store.lease import Deposed, Lease
from coordinator.store.postgres_record import to_postgres

# The fence as a statement that fails (division by zero) unless this lease still leads, holding
# its row FOR SHARE until COMMIT: no round trip of its own, and the COMMIT after it never runs.
FENCE_OR_FAIL = "SELECT 1 / (SELECT count(*) FROM ({fence}) AS held)::int"

# One statement of a group, with the rows it is run for (in order); or a Share and no rows.
Op = tuple["str | Share", list[tuple]]


class Share:
    """`fn(cursor)`, run inside the transaction of the group it is handed over with; `done` holds
    what it returned once that transaction commits, or why it did not."""

    def __init__(self, fn: Callable[[psycopg.Cursor], Any]) -> None:
        self.fn = fn
        self.done: Future = Future()
        self._outcome: Any = None
        self._error: BaseException | None = None

    def run(self, cur: psycopg.Cursor) -> None:
        cur.execute("SAVEPOINT share")
        try:
            self._outcome = self.fn(cur)
        except Exception as exc:  # noqa: BLE001 - its own failure: handed to whoever waits on it
            cur.execute("ROLLBACK TO SAVEPOINT share")  # a broken connection raises here: the group fails too
            self._error = exc
        cur.execute("RELEASE SAVEPOINT share")

    def settle(self, failed: BaseException | None) -> None:
        """The transaction committed (`failed` None) or did not."""
        if failed is not None or self._error is not None:
            self.done.set_exception(failed or self._error)
        else:
            self.done.set_result(self._outcome)


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
            ops = merged(ops for ops, _ in batch)
            shares = [sql for sql, _ in ops if isinstance(sql, Share)]
            try:
                self._write(ops, shares)
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the groups
                for share in shares:
                    share.settle(exc)
                for _, done in batch:
                    done.set_exception(exc)
            else:
                for share in shares:  # before the groups': a caller waiting on its group sees its share done
                    share.settle(None)
                for _, done in batch:
                    done.set_result(None)

    def _write(self, ops: list[Op], shares: list[Share]) -> None:
        if self._conn.closed or self._conn.broken:  # the last transaction lost its connection: a new one
            self._conn = self._connect()
        conn, lease = self._conn, self.lease
        try:
            with conn.cursor() as cur:
                with conn.pipeline():  # one round trip: sent together, synced at the end
                    cur.execute("BEGIN")
                    for sql, rows in ops:
                        if isinstance(sql, str):
                            cur.executemany(to_postgres(sql), rows)
                    if not shares:
                        self._fence_and_commit(cur, lease)
                if shares:  # a share reads as it goes: out of the pipeline, then a second one to commit
                    for share in shares:
                        share.run(cur)
                    with conn.pipeline():
                        self._fence_and_commit(cur, lease)
        except BaseException as exc:
            if not conn.broken and conn.info.transaction_status != TransactionStatus.IDLE:
                conn.execute("ROLLBACK")
            if lease is not None and isinstance(exc, psycopg.errors.DivisionByZero):
                lease.lost(f"a write was refused: lease token {lease.token} is no longer the leader's")
                raise Deposed(f"deposed: lease token {lease.token} is no longer current; "
                              "the write was rolled back") from exc
            raise

    @staticmethod
    def _fence_and_commit(cur: psycopg.Cursor, lease: Lease | None) -> None:
        if lease is not None:
            cur.execute(FENCE_OR_FAIL.format(fence=lease.FENCE_SQL), lease.fence_args())
        cur.execute("COMMIT")  # skipped by the server after any error above

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
