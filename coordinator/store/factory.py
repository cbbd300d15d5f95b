"""Pick a JobStore implementation (the contract is coordinator/store/api.py)."""

from __future__ import annotations

import re

from coordinator.store.api import JobStore
from ringleader.errors import InvalidSpec

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(url: str) -> bool:
    return url.startswith(POSTGRES_SCHEMES)


def redacted(url: str) -> str:
    """`url` fit for a log line: a PostgreSQL URL's password replaced by ***."""
    return re.sub(r"^(\w+://[^:/@]*):[^/]*@", r"\1:***@", url) if is_postgres(url) else url


def require_psycopg(url: str) -> None:
    """Fail early and clearly where a PostgreSQL URL is given but psycopg is not installed."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise InvalidSpec("--db", f"{url.split('://')[0]}://...: PostgreSQL needs psycopg: "
                                  "pip install 'ringleader[postgres]'") from exc


def open_store(url: str) -> JobStore:
    """':memory:' gives the in-memory store, a postgresql:// (or postgres://) URL the PostgreSQL
    store, anything else is an SQLite path."""
    if url == ":memory:":
        from coordinator.store.memory import MemoryJobStore

        return MemoryJobStore()
    if is_postgres(url):
        require_psycopg(url)
        from coordinator.store.postgres import PostgresJobStore  # here: psycopg is the optional extra

        return PostgresJobStore(url)
    from coordinator.store.sqlite import SqliteJobStore

    return SqliteJobStore(url)
