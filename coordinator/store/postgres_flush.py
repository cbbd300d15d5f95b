"""Waiting for the server's disk beside the writes, not in front of them
(coordinator/store/postgres_writer.py).

With a flush per commit, the writer waited for the disk at every COMMIT, and the groups handed over
meanwhile waited behind it: a submit waited for the flush of the transaction before its own, then
for its own (at 2,000 simulated workers on 2 cores, submit p99 2.5-3x SQLite's, which does not
flush; bench/results/2026-11-26-postgres-r5). So the writer's session commits without waiting
(`synchronous_commit = off`: the commit is in the WAL and visible, the flush follows), and this
thread on a connection of its own, at the server's configured level, confirms the flush: it
updates one row and commits, and a commit that waits for its flush has waited for every WAL record
before its own, so every group committed before it is as durable as a commit of its own would
have made it. Only then are the groups' Futures done: nothing is acknowledged before it is
flushed, as before. Flushes overlap the next groups' writes, and one barrier covers every group
that committed while the last one was flushing.

If the server restarts between a group's commit and its barrier, the WAL it had not flushed is gone
and a barrier on the new server proves nothing: a barrier on a reconnected session fails the
groups it covers where the server's start time changed (they are reported not stored, as a group
whose COMMIT lost its connection is).
"""

from __future__ import annotations

import threading
from typing import Callable

import psycopg

TABLE_SQL = "CREATE TABLE IF NOT EXISTS ringleader_flush (id INTEGER PRIMARY KEY, n BIGINT NOT NULL)"
BARRIER_SQL = ("INSERT INTO ringleader_flush (id, n) VALUES (1, 1) "
               "ON CONFLICT (id) DO UPDATE SET n = ringleader_flush.n + 1")

# Told once the groups before it are flushed (None) or may not be (why).
Settle = Callable[[BaseException | None], None]


class Restarted(psycopg.OperationalError):
    """The server a group committed to is not the one a barrier could reach."""


def flushes(conn: psycopg.Connection) -> bool:
    """Whether this session's commits wait for a flush (the server's or the DSN's setting)."""
    return conn.execute("SHOW synchronous_commit").fetchone()[0] != "off"


class Flusher:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn = self._connect()
        self._started = self._server_start()
        with self._conn.transaction():
            self._conn.execute(TABLE_SQL)
        self._pending: list[Settle] = []
        self._wake = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="postgres-flusher", daemon=True)
        self._thread.start()

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True, application_name="ringleader-flusher")

    def _server_start(self):
        return self._conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0]

    def after(self, settle: Settle) -> None:
        """`settle` once everything committed before this call is flushed (in the order given)."""
        with self._wake:
            self._pending.append(settle)
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._pending and not self._closing:
                    self._wake.wait()
                if not self._pending:
                    return
                batch, self._pending = self._pending, []
            try:
                self._barrier()
                failed = None
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the groups
                failed = exc
            for settle in batch:
                settle(failed)

    def _barrier(self) -> None:
        for retry in (False, True):  # once more on a new connection where only this one broke
            if self._conn.closed or self._conn.broken:
                self._conn = self._connect()
                started = self._server_start()
                if started != self._started:
                    self._started = started
                    raise Restarted("the database restarted before these writes were known to be "
                                    "flushed: they may be lost")
            try:
                self._conn.execute(BARRIER_SQL)
                return
            except psycopg.OperationalError:
                if retry or not self._conn.broken:
                    raise

    def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join()  # what was handed over first
        self._conn.close()
