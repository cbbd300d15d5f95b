"""The leader lease (coordinator/store/lease.py) and the write fence of the PostgreSQL store, on a
real PostgreSQL (tests/conftest.py `postgres`): one leader at a time, takeover on expiry, a
deposed leader's writes refused, a leader cut off from the database deposing itself in time."""

from __future__ import annotations

import os
import signal
import threading
import time

import psycopg
import pytest

from coordinator.store.factory import open_store
from coordinator.store.lease import DEPOSED, LEADING, STANDBY, Deposed, Lease
from coordinator.store.postgres import PostgresJobStore, to_postgres
from ringleader.v1 import jobs_pb2 as pb

TTL = 2.0


def wait_for(cond, timeout: float, what: str) -> float:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.02)
    return time.monotonic() - start


@pytest.fixture
def dsn(postgres, request):
    return postgres.new_schema("l" + str(abs(hash(request.node.nodeid)))[:18])


def job(job_id: str) -> pb.Job:
    j = pb.Job(id=job_id, state=pb.QUEUED, created_at=1.0)
    j.spec.world_size = 2
    j.spec.collective.op = "all_reduce"
    return j


def test_to_postgres_rewrites_only_what_the_dialects_spell_differently():
    assert to_postgres("SELECT blob FROM results WHERE job_id = ? ORDER BY idx") == \
        "SELECT blob FROM results WHERE job_id = %s ORDER BY idx"
    assert to_postgres("INSERT OR REPLACE INTO rank_logs (job_id, rank, text) VALUES (?, ?, ?)") == (
        "INSERT INTO rank_logs (job_id, rank, text) VALUES (%s, %s, %s)"
        " ON CONFLICT (job_id, rank) DO UPDATE SET text = EXCLUDED.text")
    assert to_postgres("SELECT job FROM jobs WHERE 1 AND op = ? ORDER BY seq") == "SELECT job FROM jobs WHERE op = %s ORDER BY seq"
    assert "BIGSERIAL PRIMARY KEY" in to_postgres("CREATE TABLE e (n INTEGER PRIMARY KEY, b BLOB) WITHOUT ROWID")


def test_open_store_picks_postgres_by_url_and_keeps_writes_across_reopen(dsn):
    store = open_store(dsn)
    assert isinstance(store, PostgresJobStore)
    store.defer_commits(lambda: None)
    store.create(job("a"))
    store.commit().result()
    store.close()
    again = open_store(dsn)  # migrations run again: a no-op on the current schema
    try:
        assert again.get("a") == job("a")
    finally:
        again.close()


def test_one_leader_and_a_standby_takes_over_when_renewals_stop(dsn):
    a = Lease(dsn, "a:1", ttl_s=TTL).start()
    wait_for(lambda: a.leading, 10, "a leads")
    b = Lease(dsn, "b:1", ttl_s=TTL).start()
    try:
        wait_for(lambda: b.leader == "a:1", 10, "b sees a lead")
        assert b.state == STANDBY and a.token == 1 and a.failovers == 0
        a._stop.set()  # a dies: no renewal, no goodbye
        took = wait_for(lambda: b.leading, 3 * TTL, "b takes over")
        assert b.token == 2 and b.failovers == 1 and b.leader == "b:1"
        assert took <= TTL + 1.5, took  # expiry plus one standby poll (0.5 s), with room for load
    finally:
        a.stop()
        b.stop()


def test_a_deposed_leader_cannot_write_and_says_so(dsn, caplog):
    changes = []
    a = Lease(dsn, "a:1", ttl_s=TTL, on_change=lambda lease: changes.append(lease.state)).start()
    wait_for(lambda: a.leading, 10, "a leads")
    store = open_store(dsn)
    store.fence_with(a)
    store.defer_commits(lambda: None)
    store.create(job("before"))
    store.commit()
    a._stop.set()
    time.sleep(0.1)
    # The lease expires in the database while a's process still runs (a long GC pause, say), and
    # another coordinator takes it before a's watchdog noticed.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE leader_lease SET expires_at = clock_timestamp()")
    b = Lease(dsn, "b:1", ttl_s=TTL).start()
    try:
        wait_for(lambda: b.leading, 10, "b takes over")
        store.create(job("after"))
        with pytest.raises(Deposed):
            store.commit().result()  # deferred: the COMMIT (and its fence) runs on another thread
        assert a.state == DEPOSED and changes == [LEADING, DEPOSED]
        assert "deposed as leader" in caplog.text
        reader = open_store(dsn)
        try:
            assert [j.id for j in reader.list()] == ["before"]  # the fenced write never landed
        finally:
            reader.close()
    finally:
        store.close()
        a.stop()
        b.stop()


def test_a_leader_cut_off_from_the_database_deposes_itself_within_the_lease_time(dsn):
    a = Lease(dsn, "a:1", ttl_s=TTL).start()
    wait_for(lambda: a.leading, 10, "a leads")
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The partition: the server process that serves a's lease connection stops answering.
        pids = [r[0] for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", ("ringleader-lease a:1",))]
    assert len(pids) == 1
    os.kill(pids[0], signal.SIGSTOP)
    b = Lease(dsn, "b:1", ttl_s=TTL).start()
    try:
        cut = time.monotonic()
        wait_for(lambda: a.state == DEPOSED, 2 * TTL, "a deposes itself")
        deposed_after = time.monotonic() - cut
        wait_for(lambda: b.leading, 3 * TTL, "b takes over")
        assert deposed_after <= TTL, deposed_after  # before the database lets b in
        assert b.token == 2
    finally:
        os.kill(pids[0], signal.SIGCONT)
        a.stop()
        b.stop()


def test_two_leases_racing_never_both_lead(dsn):
    leases = [Lease(dsn, f"c{i}:1", ttl_s=TTL) for i in range(4)]
    barrier = threading.Barrier(len(leases))

    def go(lease: Lease) -> None:
        barrier.wait()
        lease.start()

    threads = [threading.Thread(target=go, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        wait_for(lambda: any(lease.leading for lease in leases), 10, "one leads")
        time.sleep(TTL)  # several renew/acquire rounds
        assert sum(lease.leading for lease in leases) == 1
    finally:
        for lease in leases:
            lease.stop()


def test_writes_and_reads_never_wait_for_a_group_in_flight(dsn):
    groups = []
    store = open_store(dsn)
    store.defer_commits(lambda: groups.append(1))
    other = open_store(dsn)  # another coordinator's view: committed rows only
    blocker = psycopg.connect(dsn, autocommit=True)
    try:
        store.create(job("a"))
        assert other.list() == [] and len(groups) == 1  # grouped: not written yet
        blocker.execute("BEGIN")
        blocker.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")  # the server stalls the group
        later = store.commit()
        t0 = time.monotonic()
        store.create(job("b"))  # the next group opens while the first one waits for the server
        assert store.get("a") == job("a") and store.get("b") == job("b") and store.events("a") == []
        assert time.monotonic() - t0 < 0.5 and not later.done() and len(groups) == 2
        blocker.execute("ROLLBACK")
        assert later.result(timeout=10) is None  # durable once the server took it
        assert [j.id for j in other.list()] == ["a"]
        store.commit().result()
        assert [j.id for j in other.list()] == ["b", "a"]
        assert store.commit() is None  # nothing open: nothing to wait for
    finally:
        blocker.close()
        store.close()
        other.close()


def test_a_postgres_url_is_logged_without_its_password():
    from coordinator.store.factory import redacted

    assert redacted("postgresql://ring:s3cr%40t@db:5432/x?sslmode=require") == "postgresql://ring:***@db:5432/x?sslmode=require"
    assert redacted("postgres://u:p@h/d") == "postgres://u:***@h/d"
    assert redacted("postgresql://u@/postgres?host=/tmp") == "postgresql://u@/postgres?host=/tmp"  # none to hide
    assert redacted("/var/lib/ringleader/jobs.db") == "/var/lib/ringleader/jobs.db"
