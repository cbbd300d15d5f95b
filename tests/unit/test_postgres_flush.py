"""The PostgreSQL writer waits for the disk beside its writes (coordinator/store/postgres_flush.py):
a group is committed without waiting for its flush, and its Future is done only once a barrier
committed after it has been flushed. A real PostgreSQL (tests/pgserver.py)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from coordinator.store import postgres_flush
from coordinator.store.postgres_writer import GroupWriter

INSERT = "INSERT INTO t (v) VALUES (?)"


@pytest.fixture
def dsn(postgres, request):
    dsn = postgres.new_schema("f" + str(abs(hash(request.node.nodeid)))[:18])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (v INTEGER)")
    return dsn


@pytest.fixture
def held_barrier(monkeypatch):
    """The flusher's barriers wait until `.set()` (each is told when it starts: `started`)."""
    release, started = threading.Event(), threading.Event()
    barrier = postgres_flush.Flusher._barrier

    def held(self):
        started.set()
        assert release.wait(30), "the test never released the barrier"
        barrier(self)

    monkeypatch.setattr(postgres_flush.Flusher, "_barrier", held)
    release.started = started
    return release


def rows(dsn: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT v FROM t ORDER BY v")]


def barriers(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('ringleader_flush')").fetchone()[0] is None:
            return 0
        row = conn.execute("SELECT n FROM ringleader_flush WHERE id = 1").fetchone()
    return row[0] if row else 0


def test_a_group_is_done_only_after_a_barrier_behind_its_commit_is_flushed(dsn, held_barrier):
    writer = GroupWriter(dsn)
    try:
        first = writer.write([(INSERT, [(1,)])])
        assert held_barrier.started.wait(10)
        assert rows(dsn) == [1]  # committed (visible), not yet confirmed flushed
        second = writer.write([(INSERT, [(2,)])])  # written while the first one's flush is waited for
        deadline = time.monotonic() + 10
        while rows(dsn) != [1, 2]:
            assert time.monotonic() < deadline, "the second group waited for the first one's flush"
            time.sleep(0.01)
        assert not first.done() and not second.done()
        held_barrier.set()
        first.result(10), second.result(10)
        assert barriers(dsn) >= 1
        with psycopg.connect(dsn, autocommit=True) as conn:  # the server's own level, for the barrier
            assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
    finally:
        held_barrier.set()
        writer.close()


def test_where_the_dsn_turns_the_flush_off_there_is_no_barrier(dsn):
    assert dsn.split("&")[-1].startswith("options=")  # the test schema's options: one more
    writer = GroupWriter(dsn + "%20-c%20synchronous_commit%3Doff")
    try:
        assert writer._flusher is None
        writer.write([(INSERT, [(1,)])]).result(10)
        assert rows(dsn) == [1] and barriers(dsn) == 0
    finally:
        writer.close()


def test_groups_whose_flush_a_crash_may_have_lost_are_not_reported_stored(held_barrier):
    from pgserver import PostgresServer, Unavailable

    server = PostgresServer()
    try:
        try:
            server.start()
        except Unavailable as exc:
            pytest.skip(f"no PostgreSQL: {exc}")
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (v INTEGER)")
        writer = GroupWriter(server.dsn)
        try:
            done = writer.write([(INSERT, [(1,)])])
            assert held_barrier.started.wait(10)
            server.crash_and_restart()
            held_barrier.set()
            with pytest.raises(psycopg.OperationalError, match="restarted before these writes"):
                done.result(30)
            # Writing goes on: the writer's session died with the server, and the group sent on it
            # fails (as before this change); the next one goes on a new session, with a new barrier.
            with pytest.raises(psycopg.OperationalError, match="closed the connection|connection is lost"):
                writer.write([(INSERT, [(2,)])]).result(30)
            writer.write([(INSERT, [(3,)])]).result(30)
            assert 3 in rows(server.dsn)
        finally:
            held_barrier.set()
            writer.close()
    finally:
        server.stop()
