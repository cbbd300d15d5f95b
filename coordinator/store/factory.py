"""Pick a JobStore implementation (the contract is coordinator/store/api.py)."""

from __future__ import annotations

from coordinator.store.api import JobStore


def open_store(url: str) -> JobStore:
    """':memory:' gives the in-memory store, anything else is an SQLite path."""
    if url == ":memory:":
        from coordinator.store.memory import MemoryJobStore

        return MemoryJobStore()
    from coordinator.store.sqlite import SqliteJobStore

    return SqliteJobStore(url)
