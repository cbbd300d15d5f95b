"""The coordinator's SQLite store (`--db PATH`, the default): the write-behind store
(coordinator/store/behind.py: memory on the loop, a writer thread behind it) on SQLite. Its record
is SqliteJobStore (coordinator/store/sqlite.py: the schema, its migrations and every query) on a
connection of its own, its writer coordinator/store/sqlite_writer.py. WAL mode lets the two
connections read and write the file at once."""

from __future__ import annotations

from pathlib import Path

from coordinator.store.behind import WriteBehindStore
from coordinator.store.sqlite import SqliteJobStore
from coordinator.store.sqlite_trends import downsample_share
from coordinator.store.sqlite_writer import SqliteGroupWriter


class SqliteBehindStore(WriteBehindStore):
    trend_share = staticmethod(downsample_share)

    def __init__(self, path: str | Path) -> None:
        super().__init__(SqliteJobStore(path), lambda: SqliteGroupWriter(str(path)))
