"""The PostgreSQL store's writes (coordinator/store/postgres.py): the group writer
(coordinator/store/group_writer.py) on a connection of its own, each transaction sent in pipeline
mode (BEGIN, the statements, the fence and COMMIT in one round trip), so the server is waited for
once per transaction however many turns it holds.

Fencing: with a lease set (`lease`), every group checks, just before its COMMIT, that this
coordinator's lease token is still the current, unexpired one, holding the lease row FOR SHARE
so no standby can take the lease over between the check and the commit. A deposed leader's
group is rolled back and raises `Deposed`. A share (group_writer.Share) runs after the group's
statements and before the fence, so it is fenced as they are.
"""

from __future__ import annotations

import psycopg
from psycopg.pq import TransactionStatus

from coordinator.store.group_writer import GroupWriter, Op, Share
from coordinator.store.lease import Deposed, Lease
from coordinator.store.postgres_record import to_postgres

# The fence as a statement that fails (division by zero) unless this lease still leads, holding
# its row FOR SHARE until COMMIT: no round trip of its own, and the COMMIT after it never runs.
FENCE_OR_FAIL = "SELECT 1 / (SELECT count(*) FROM ({fence}) AS held)::int"


class PgGroupWriter(GroupWriter):
    thread_name = "postgres-writer"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.lease: Lease | None = None
        self._conn = self._connect()
        super().__init__()

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True, application_name="ringleader-writer")

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

    def _disconnect(self) -> None:
        self._conn.close()
