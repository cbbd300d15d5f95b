"""The PostgreSQL store's memory (coordinator/store/postgres.py): what the coordinator's loop reads
is in memory; a finished job leaves it only once durable, and is then read from the server, by
`prefetch` off the loop; a real PostgreSQL (tests/pgserver.py)."""

from __future__ import annotations

import psycopg
import pytest

from coordinator.store import postgres
from coordinator.store.factory import open_store
from coordinator.store.seen import Seen
from ringleader.errors import NotFound
from ringleader.v1 import jobs_pb2 as pb


@pytest.fixture
def dsn(postgres, request):
    return postgres.new_schema("p" + str(abs(hash(request.node.nodeid)))[:18])


def finished(job_id: str, request_id: str = "") -> pb.Job:
    """A job to finish (created QUEUED)."""
    j = pb.Job(id=job_id, state=pb.QUEUED, created_at=1.0, request_id=request_id)
    j.spec.world_size = 1
    j.spec.collective.op = "all_reduce"
    return j


def test_finished_jobs_leave_memory_once_durable_and_are_read_back_from_the_server(dsn, monkeypatch):
    monkeypatch.setattr(postgres, "HOT_FINISHED", 2)
    store = open_store(dsn)
    store.defer_commits(lambda: None)
    try:
        for i in range(4):
            j = finished(f"j{i}", request_id=f"r{i}")
            store.create(j)
            store.add_result(j.id, pb.SizeResult(op="all_reduce", size_bytes=8 << i))
            store.add_event(pb.JobEvent(job_id=j.id, seq=1))
            j.state = pb.SUCCEEDED
            store.update(j)
        assert all(store.resident(f"j{i}") for i in range(4))  # nothing durable yet: all kept
        store.commit().result()
        store.commit()  # the next turn drops the oldest durable ones
        assert [store.resident(f"j{i}") for i in range(4)] == [False, False, True, True]
        assert not store.resident(request_id="r0") and store.resident(request_id="r3")
        with psycopg.connect(dsn, autocommit=True) as conn:  # what the server has, read without the store
            assert conn.execute("SELECT count(*) FROM jobs WHERE state = %s", (pb.SUCCEEDED,)).fetchone()[0] == 4
        store.prefetch(job_id="j0", request_id="r1")
        assert store.resident("j0", "r1") and store.resident("j1")
        old = store.get("j0")
        assert old.state == pb.SUCCEEDED and [r.size_bytes for r in old.results] == [8]
        assert [e.seq for e in store.events("j0")] == [1] and store.job_for_request("r1") == "j1"
        store.prefetch(job_id="nope", request_id="never")
        assert store.resident("nope", "never")  # known absent: no second trip to the server
        with pytest.raises(NotFound):
            store.get("nope")
        assert store.job_for_request("never") == ""
    finally:
        store.close()


def test_a_group_the_server_refuses_fails_its_future_and_the_next_group_is_written(dsn):
    store = open_store(dsn)
    store.defer_commits(lambda: None)
    try:
        store.create(finished("a"))
        store.commit().result()
        with psycopg.connect(dsn, autocommit=True) as conn:  # another writer took the id meanwhile
            conn.execute("INSERT INTO jobs (id, state, op, created_at, job) VALUES ('b', 1, 'x', 1, '')")
        store.create(finished("b"))  # unknown to this store's memory: refused by the server at commit
        with pytest.raises(psycopg.errors.UniqueViolation):
            store.commit().result()
        store.create(finished("c"))  # the next group is a new transaction
        store.commit().result()
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute("SELECT id, length(job) FROM jobs ORDER BY seq").fetchall()
        assert [r[0] for r in rows] == ["a", "b", "c"] and rows[1][1] == 0  # b: the other writer's row
    finally:
        store.close()


def test_a_new_request_id_needs_no_read_and_one_stored_before_a_restart_is_found(dsn):
    first = open_store(dsn)
    old = finished("old", request_id="r-old")
    old.state = pb.SUCCEEDED
    first.create(old)
    first.close()
    store = open_store(dsn)  # a restart: r-old's job is finished, not in memory
    try:
        assert store.resident(request_id="r-new")  # never seen: known new without the server
        assert not store.resident(request_id="r-old")
        store.prefetch(request_id="r-old")
        assert store.resident(request_id="r-old") and store.job_for_request("r-old") == "old"
    finally:
        store.close()


def test_seen_never_forgets_a_key_and_rarely_claims_one_it_never_had():
    seen = Seen(capacity=1000)
    added = [f"added-{i}" for i in range(5000)]  # beyond the first filter's capacity: it grows
    for key in added:
        seen.add(key)
    assert all(seen.maybe(k) for k in added)
    false = sum(seen.maybe(f"other-{i}") for i in range(10_000))
    assert false < 300, false  # about 1% per filter, a few filters
