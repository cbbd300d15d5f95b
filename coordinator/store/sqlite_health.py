"""The SQLite store's fleet-health tables, as mixins of SqliteJobStore (which provides `_tx`):
baselines (put_baseline/baseline/baselines: one serialized pb.BaselineEntry per key) and worker
verdicts (set_worker_health/worker_health: one serialized pb.WorkerHealth per worker id), worker
credentials (one digest per worker id, answered from memory)."""

from __future__ import annotations

from coordinator.store.hook_log import SqliteHookLog  # noqa: F401 - with the other fleet tables, for sqlite.py
from ringleader.v1 import jobs_pb2 as pb


BASELINES_KEPT = 4096  # entries answered from memory (a 100,000-entry import would otherwise stay)


class SqliteBaselines:
    """Every stored result row reads its baseline and writes it back: the read, a statement and
    a turn of the GIL per row (sqlite.py's _tx), is answered from the entries last read or
    written. Only this process writes the table (one coordinator per file), so they stay true;
    a failed commit forgets them (SqliteJobStore.commit)."""

    _baselines_kept: dict[str, bytes | None] | None = None

    def _kept(self) -> dict[str, bytes | None]:
        if self._baselines_kept is None:
            self._baselines_kept = {}
        return self._baselines_kept

    def _keep(self, key: str, blob: bytes | None) -> None:
        kept = self._kept()
        kept.pop(key, None)
        kept[key] = blob
        if len(kept) > BASELINES_KEPT:
            del kept[next(iter(kept))]  # the least recently used

    def put_baseline(self, entry: pb.BaselineEntry) -> None:
        blob = entry.SerializeToString()
        with self._tx(write=True, one=True) as c:  # type: ignore[attr-defined]
            c.execute("INSERT OR REPLACE INTO baselines (key, blob) VALUES (?, ?)", (entry.key, blob))
        self._keep(entry.key, blob)

    def baseline(self, key: str) -> pb.BaselineEntry | None:
        kept = self._kept()
        if key in kept:
            blob = kept[key]
        else:
            with self._tx() as c:  # type: ignore[attr-defined]
                row = c.execute("SELECT blob FROM baselines WHERE key = ?", (key,)).fetchone()
            blob = row[0] if row else None
        self._keep(key, blob)  # kept, or moved to the most recently used end
        return pb.BaselineEntry.FromString(blob) if blob is not None else None

    def baselines(self, after: str = "", limit: int = 0) -> list[pb.BaselineEntry]:
        with self._tx() as c:  # type: ignore[attr-defined]
            # No LIMIT for "all": PostgreSQL (which shares this SQL) refuses SQLite's LIMIT -1.
            sql = "SELECT blob FROM baselines WHERE key > ? ORDER BY key" + (" LIMIT ?" if limit else "")
            rows = c.execute(sql, (after, limit) if limit else (after,)).fetchall()
        return [pb.BaselineEntry.FromString(r[0]) for r in rows]


class SqliteWorkerHealth:
    def set_worker_health(self, worker_id: str, health: pb.WorkerHealth) -> None:
        with self._tx(write=True, one=True) as c:  # type: ignore[attr-defined]
            c.execute("INSERT OR REPLACE INTO worker_health (worker_id, blob) VALUES (?, ?)",
                      (worker_id, health.SerializeToString()))

    def worker_health(self) -> dict[str, pb.WorkerHealth]:
        with self._tx() as c:  # type: ignore[attr-defined]
            return {w: pb.WorkerHealth.FromString(b) for w, b in c.execute("SELECT worker_id, blob FROM worker_health")}


class SqliteCredentials:
    """Each registration asks for its id's credential: in bursts of 5,000-10,000 registrations
    these reads, one SQLite transaction each, were the loop's stack in a quarter to a third of the
    stall watch's samples (4 x H200 host). Only this process writes the table (one coordinator per
    SQLite file; `--forget-worker` runs inside it), so the copy read at first use stays true."""

    _credentials: dict[str, str] | None = None

    def _bound(self) -> dict[str, str]:
        if self._credentials is None:
            self._credentials = self.worker_credentials()
        return self._credentials

    def worker_credentials(self) -> dict[str, str]:
        """Every bound credential digest, by worker id, read now (a write-behind store's start-up load)."""
        with self._tx() as c:  # type: ignore[attr-defined]
            return dict(c.execute("SELECT worker_id, digest FROM worker_credentials").fetchall())

    def worker_credential(self, worker_id: str) -> str:
        return self._bound().get(worker_id, "")

    def set_worker_credential(self, worker_id: str, digest: str) -> None:
        bound = self._bound()
        with self._tx(write=True, one=True) as c:  # type: ignore[attr-defined]
            c.execute("INSERT OR REPLACE INTO worker_credentials (worker_id, digest) VALUES (?, ?)",
                      (worker_id, digest))
        bound[worker_id] = digest  # once the statement took

    def forget_worker_credential(self, worker_id: str) -> bool:
        bound = self._bound()
        with self._tx(write=True, one=True) as c:  # type: ignore[attr-defined]
            gone = c.execute("DELETE FROM worker_credentials WHERE worker_id = ?", (worker_id,)).rowcount > 0
        bound.pop(worker_id, None)
        return gone
