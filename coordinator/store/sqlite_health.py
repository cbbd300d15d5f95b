"""The SQLite store's fleet-health tables, as mixins of SqliteJobStore (which provides `_tx`):
baselines (put_baseline/baseline/baselines: one serialized pb.BaselineEntry per key) and worker
verdicts (set_worker_health/worker_health: one serialized pb.WorkerHealth per worker id)."""

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

    def baselines(self, after: str = "", limit: int = 0) -> list[pb.BaselineEntry]:
        with self._tx() as c:  # type: ignore[attr-defined]
            # No LIMIT for "all": PostgreSQL (which shares this SQL) refuses SQLite's LIMIT -1.
            sql = "SELECT blob FROM baselines WHERE key > ? ORDER BY key" + (" LIMIT ?" if limit else "")
            rows = c.execute(sql, (after, limit) if limit else (after,)).fetchall()
        return [pb.BaselineEntry.FromString(r[0]) for r in rows]


class SqliteWorkerHealth:
    def set_worker_health(self, worker_id: str, health: pb.WorkerHealth) -> None:
        with self._tx(write=True) as c:  # type: ignore[attr-defined]
            c.execute("INSERT OR REPLACE INTO worker_health (worker_id, blob) VALUES (?, ?)",
                      (worker_id, health.SerializeToString()))

    def worker_health(self) -> dict[str, pb.WorkerHealth]:
        with self._tx() as c:  # type: ignore[attr-defined]
            return {w: pb.WorkerHealth.FromString(b) for w, b in c.execute("SELECT worker_id, blob FROM worker_health")}
