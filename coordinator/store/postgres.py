"""PostgreSQL JobStore (`--db postgresql://...`): the store on a database that several
coordinators share, one of them leading (coordinator/store/lease.py). It is the write-behind
store (coordinator/store/behind.py: memory on the loop, a writer thread behind it) on PostgreSQL's
record (coordinator/store/postgres_record.py: SqliteJobStore's queries, respelled) and writer
(coordinator/store/postgres_writer.py: a round trip per transaction, fenced by the lease); its
trends are downsampled in the database (coordinator/store/postgres_trends.py)."""

from __future__ import annotations

from coordinator.store.behind import WriteBehindStore
from coordinator.store.postgres_record import PostgresRecord, to_postgres  # noqa: F401 - to_postgres: its home for tests
from coordinator.store.postgres_trends import downsample_share
from coordinator.store.postgres_writer import PgGroupWriter


class PostgresJobStore(WriteBehindStore):
    trend_share = staticmethod(downsample_share)

    def __init__(self, dsn: str) -> None:
        super().__init__(PostgresRecord(dsn), lambda: PgGroupWriter(dsn))

    def fence_with(self, lease) -> None:
        """From now on, every group commits only while `lease` leads."""
        self._writer.lease = lease  # type: ignore[attr-defined]
