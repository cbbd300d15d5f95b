"""Pick a JobStore implementation (the contract is coordinator/store/api.py)."""

from __future__ import annotations

from coordinator.store.api import JobStore

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(url: str) -> bool:
    return url.startswith(POSTGRES_SCHEMES)


def open_store(url: str) -> JobStore:
    """':memory:' gives the in-memory store, a postgresql:// (or postgres://) URL the PostgreSQL
    store, anything else is an SQLite path."""
    if url == ":memory:":
        from coordinator.store.memory import MemoryJobStore

        return MemoryJobStore()
    if is_postgres(url):
        try:  # imported here: psycopg is the optional `postgres` extra
            from coordinator.store.postgres import PostgresJobStore
        except ImportError as exc:
            raise RuntimeError(f"--db {url.split('://')[0]}://...: PostgreSQL needs psycopg: "
                               "pip install 'ringleader[postgres]'") from exc
        return PostgresJobStore(url)
    from coordinator.store.sqlite import SqliteJobStore

    return SqliteJobStore(url)
