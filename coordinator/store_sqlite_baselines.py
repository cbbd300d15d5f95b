"""The SQLite store's baseline table (the JobStore contract's put_baseline/baseline/baselines):
one serialized pb.BaselineEntry per key. A mixin of SqliteJobStore, which provides `_tx`."""

from __future__ import annotations

from ringleader.v1 import jobs_pb2 as pb


class SqliteBaselines:
    def put_baseline(self, entry: pb.BaselineEntry) -> None:
        with self._tx(write=True) as c:  # type: ignore[attr-defined]
            c.execute("INSERT OR REPLACE INTO baselines (key, blob) VALUES (?, ?)", (entry.key, entry.SerializeToString()))

    def baseline(self, key: str) -> pb.BaselineEntry | None:
        with self._tx() as c:  # type: ignore[attr-defined]
            row = c.execute("SELECT blob FROM baselines WHERE key = ?", (key,)).fetchone()
        return pb.BaselineEntry.FromString(row[0]) if row else None

    def baselines(self) -> list[pb.BaselineEntry]:
        with self._tx() as c:  # type: ignore[attr-defined]
            rows = c.execute("SELECT blob FROM baselines ORDER BY key").fetchall()
        return [pb.BaselineEntry.FromString(r[0]) for r in rows]
