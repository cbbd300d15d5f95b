"""The remediation hooks' delivery log (coordinator/health/hooks.py) in each job store: one
serialized pb.HooksDelivery per (event id, webhook URL), replaced as its attempts go on.
MemoryHookLog is a part the memory store holds (and so the write-behind stores' memory);
SqliteHookLog a mixin of SqliteJobStore, which provides `_tx`; the write-behind store writes its
rows with the group (coordinator/store/behind_fleet.py)."""

from __future__ import annotations

from ringleader.v1 import jobs_pb2 as pb

UPSERT = "INSERT OR REPLACE INTO hook_deliveries (event_id, url, first_at, blob) VALUES (?, ?, ?, ?)"


def _newest_first(rows: list[pb.HooksDelivery], limit: int) -> list[pb.HooksDelivery]:
    rows = sorted(rows, key=lambda d: (-d.first_at, d.event_id, d.url))
    return rows[:limit] if limit else rows


class MemoryHookLog:
    """The log in memory, owned by a store that answers from memory."""

    def __init__(self, rows: dict[tuple[str, str], pb.HooksDelivery] | None = None) -> None:
        self.rows = rows or {}

    def put(self, d: pb.HooksDelivery) -> None:
        self.rows[(d.event_id, d.url)] = _copy(d)

    def newest(self, limit: int = 0) -> list[pb.HooksDelivery]:
        return _newest_first([_copy(d) for d in self.rows.values()], limit)


class SqliteHookLog:
    def put_hook_delivery(self, d: pb.HooksDelivery) -> None:
        with self._tx(write=True, one=True) as c:  # type: ignore[attr-defined]
            c.execute(UPSERT, (d.event_id, d.url, d.first_at, d.SerializeToString()))

    def hook_deliveries(self, limit: int = 0) -> list[pb.HooksDelivery]:
        with self._tx() as c:  # type: ignore[attr-defined]
            sql = "SELECT blob FROM hook_deliveries ORDER BY first_at DESC, event_id, url" + (" LIMIT ?" if limit else "")
            rows = c.execute(sql, (limit,) if limit else ()).fetchall()
        return [pb.HooksDelivery.FromString(r[0]) for r in rows]


def _copy(d: pb.HooksDelivery) -> pb.HooksDelivery:
    out = pb.HooksDelivery()
    out.CopyFrom(d)
    return out
