"""The write-behind store's memory (coordinator/store/behind.py), on a real PostgreSQL
(tests/pgserver.py): what the coordinator's loop reads is in
memory; a finished job leaves it only once durable, and is then read from the database, by
`prefetch` off the loop; a group the database refuses fails alone."""

from __future__ import annotations

import pytest

from coordinator.store import behind
from coordinator.store.factory import open_store
from coordinator.store.seen import Seen
from ringleader.errors import NotFound
from ringleader.v1 import jobs_pb2 as pb


class Db:
    """The database under a store, and statements run on it without the store."""

    def __init__(self, url: str) -> None:
        self.url = url

    def sql(self, stmt: str, args: tuple = ()) -> list[tuple]:
        import psycopg  # the optional extra

        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(stmt.replace("?", "%s"), args)
            return cur.fetchall() if cur.description else []


@pytest.fixture
def db(request):
    pg = request.getfixturevalue("postgres")
    return Db(pg.new_schema("p" + str(abs(hash(request.node.nodeid)))[:18]))


def finished(job_id: str, request_id: str = "") -> pb.Job:
    """A job to finish (created QUEUED)."""
    j = pb.Job(id=job_id, state=pb.QUEUED, created_at=1.0, request_id=request_id)
    j.spec.world_size = 1
    j.spec.collective.op = "all_reduce"
    return j


def test_finished_jobs_leave_memory_once_durable_and_are_read_back_from_the_database(db, monkeypatch):
    monkeypatch.setattr(behind, "HOT_FINISHED", 2)
    store = open_store(db.url)
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
        assert db.sql("SELECT count(*) FROM jobs WHERE state = ?", (pb.SUCCEEDED,)) == [(4,)]
        store.prefetch(job_id="j0", request_id="r1")
        assert store.resident("j0", "r1") and store.resident("j1")
        old = store.get("j0")
        assert old.state == pb.SUCCEEDED and [r.size_bytes for r in old.results] == [8]
        assert [e.seq for e in store.events("j0")] == [1] and store.job_for_request("r1") == "j1"
        store.prefetch(job_id="nope", request_id="never")
        assert store.resident("nope", "never")  # known absent: no second read of the database
        with pytest.raises(NotFound):
            store.get("nope")
        assert store.job_for_request("never") == ""
    finally:
        store.close()


def test_a_group_refused_before_its_commit_returns_still_fails_the_commit(db, monkeypatch):
    """The writer may finish a group before commit() returns (its thread ran first): the refusal
    must still reach the caller, never read as "nothing to wait for" (which acknowledged it)."""
    store = open_store(db.url)
    store.defer_commits(lambda: None)
    real = store._writer.write

    def finished_first(ops):
        later = real(ops)
        later.exception(timeout=30)  # the writer has ended this group before the store looks at it
        return later

    monkeypatch.setattr(store._writer, "write", finished_first)
    try:
        store.create(finished("a"))
        store.commit().result()
        db.sql("INSERT INTO jobs (id, state, op, created_at, job) VALUES ('b', 1, 'x', 1, ?)", (b"",))
        store.create(finished("b"))
        later = store.commit()
        assert later is not None
        with pytest.raises(Exception, match="(?i)unique"):
            later.result()
    finally:
        store.close()


def test_a_group_the_database_refuses_fails_its_future_and_the_next_group_is_written(db):
    store = open_store(db.url)
    store.defer_commits(lambda: None)
    try:
        store.create(finished("a"))
        store.commit().result()
        # another writer took the id meanwhile
        db.sql("INSERT INTO jobs (id, state, op, created_at, job) VALUES ('b', 1, 'x', 1, ?)", (b"",))
        store.create(finished("b"))  # unknown to this store's memory: refused by the database at commit
        with pytest.raises(Exception, match="(?i)unique"):
            store.commit().result()
        store.create(finished("c"))  # the next group is a new transaction
        store.commit().result()
        rows = db.sql("SELECT id, length(job) FROM jobs ORDER BY seq")
        assert [r[0] for r in rows] == ["a", "b", "c"] and rows[1][1] == 0  # b: the other writer's row
    finally:
        store.close()


def test_a_new_request_id_needs_no_read_and_one_stored_before_a_restart_is_found(db):
    first = open_store(db.url)
    old = finished("old", request_id="r-old")
    old.state = pb.SUCCEEDED
    first.create(old)
    first.close()
    store = open_store(db.url)  # a restart: r-old's job is finished, not in memory
    try:
        assert store.resident(request_id="r-new")  # never seen: known new without the database
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
