"""A write-behind store's (coordinator/store/behind.py) fleet tables: worker verdicts,
credentials, baselines and the hooks' delivery log answered from memory and written with the group, as its jobs are (its
bandwidth trends: coordinator/store/behind_trends.py). A mixin of WriteBehindStore, which
provides _mem, _write and _written."""

from __future__ import annotations

from coordinator.store.hook_log import UPSERT
from ringleader.v1 import jobs_pb2 as pb


class BehindFleet:
    def put_hook_delivery(self, d: pb.HooksDelivery) -> None:
        with self._mem:  # type: ignore[attr-defined]
            super().put_hook_delivery(d)  # type: ignore[misc]
            self._write("", UPSERT, (d.event_id, d.url, d.first_at, d.SerializeToString()))  # type: ignore[attr-defined]
        self._written()  # type: ignore[attr-defined]

    def set_worker_health(self, worker_id: str, health: pb.WorkerHealth) -> None:
        with self._mem:  # type: ignore[attr-defined]
            super().set_worker_health(worker_id, health)
            self._write("", "INSERT OR REPLACE INTO worker_health (worker_id, blob) VALUES (?, ?)",
                        (worker_id, health.SerializeToString()))
        self._written()

    def set_worker_credential(self, worker_id: str, digest: str) -> None:
        with self._mem:  # type: ignore[attr-defined]
            super().set_worker_credential(worker_id, digest)
            self._write("", "INSERT OR REPLACE INTO worker_credentials (worker_id, digest) VALUES (?, ?)",
                        (worker_id, digest))
        self._written()

    def forget_worker_credential(self, worker_id: str) -> bool:
        with self._mem:  # type: ignore[attr-defined]
            bound = super().forget_worker_credential(worker_id)
            if bound:
                self._write("", "DELETE FROM worker_credentials WHERE worker_id = ?", (worker_id,))
        self._written()
        return bound

    def put_baseline(self, entry: pb.BaselineEntry) -> None:
        with self._mem:  # type: ignore[attr-defined]
            super().put_baseline(entry)
            self._write("", "INSERT OR REPLACE INTO baselines (key, blob) VALUES (?, ?)", (entry.key, entry.SerializeToString()))
        self._written()
