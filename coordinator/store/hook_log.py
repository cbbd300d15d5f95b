"""The remediation hooks' delivery log (coordinator/health/hooks.py) in each job store: one
serialized pb.HooksDelivery per (event id, webhook URL), replaced as its attempts go on. Mixins:
MemoryHookLog (MemoryJobStore, and so the write-behind stores' memory), SqliteHookLog
(SqliteJobStore, which provides `_tx`), BehindHookLog (WriteBehindStore: memory at once, the
database with the group)."""

from __future__ import annotations

from ringleader.v1 import jobs_pb2 as pb

UPSERT = "INSERT OR REPLACE INTO hook_deliveries (event_id, url, first_at, blob) VALUES (?, ?, ?, ?)"


def _newest_first(rows: list[pb.HooksDelivery], limit: int) -> list[pb.HooksDelivery]:
    rows = sorted(rows, key=lambda d: (-d.first_at, d.event_id, d.url))
    return rows[:limit] if limit else rows


class MemoryHookLog:
    _hook_log: dict[tuple[str, str], pb.HooksDelivery] | None = None

    def _hooks(self) -> dict[tuple[str, str], pb.HooksDelivery]:
        if self._hook_log is None:
            self._hook_log = {}
        return self._hook_log

    def put_hook_delivery(self, d: pb.HooksDelivery) -> None:
        copy = pb.HooksDelivery()
        copy.CopyFrom(d)
        self._hooks()[(d.event_id, d.url)] = copy

    def hook_deliveries(self, limit: int = 0) -> list[pb.HooksDelivery]:
        return _newest_first([_copy(d) for d in self._hooks().values()], limit)


class SqliteHookLog:
    def put_hook_delivery(self, d: pb.HooksDelivery) -> None:
        with self._tx(write=True, one=True) as c:  # type: ignore[attr-defined]
            c.execute(UPSERT, (d.event_id, d.url, d.first_at, d.SerializeToString()))

    def hook_deliveries(self, limit: int = 0) -> list[pb.HooksDelivery]:
        with self._tx() as c:  # type: ignore[attr-defined]
            sql = "SELECT blob FROM hook_deliveries ORDER BY first_at DESC, event_id, url" + (" LIMIT ?" if limit else "")
            rows = c.execute(sql, (limit,) if limit else ()).fetchall()
        return [pb.HooksDelivery.FromString(r[0]) for r in rows]


class BehindHookLog:
    def put_hook_delivery(self, d: pb.HooksDelivery) -> None:
        with self._mem:  # type: ignore[attr-defined]
            super().put_hook_delivery(d)  # type: ignore[misc]
            self._write("", UPSERT, (d.event_id, d.url, d.first_at, d.SerializeToString()))  # type: ignore[attr-defined]
        self._written()  # type: ignore[attr-defined]


def _copy(d: pb.HooksDelivery) -> pb.HooksDelivery:
    out = pb.HooksDelivery()
    out.CopyFrom(d)
    return out
