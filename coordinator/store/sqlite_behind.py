"""The write-behind store (coordinator/store/behind.py: memory on the loop, a writer behind it) on
SQLite, `--db sqlite-behind:PATH`. Its record is SqliteJobStore (coordinator/store/sqlite.py: the
schema, its migrations and every query) on a connection of its own, its writer
coordinator/store/sqlite_writer.py (a process of its own). WAL mode lets the two connections read
and write the file at once.

An experiment, not the default (`--db PATH` is SqliteJobStore, on the loop). Measured with
5,000 simulated workers draining 10,000 queued jobs, the coordinator pinned to 2 cores of a 32-core
host (docs/results/2026-11-27-h200x2-r11): it drained the queue (12,251 jobs done in 45 s against
4,027-6,345 on the default store), and the users' calls starved: submit p50 2.8-4.7 s, p99 13-15 s,
against 24-26 ms and 155-566 ms. With 3,000 workers on the 2-core development machine: submit p50
169-486 ms against 29-30 ms. The calls' time on the core loop stayed under 0.3 s
and the edge loop's timers ran on time: they waited between gRPC receiving them and their
handlers starting (docs/results/2026-11-27-local-r11). Measured in r12, that wait was gRPC's own
threads short of CPU (docs/results/2026-11-27-local-r12). It waits for an admission control that
keeps the coordinator's CPU below its cores (issue 27).
"""

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
