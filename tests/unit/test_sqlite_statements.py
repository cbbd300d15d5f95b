"""How many statements the SQLite store runs for what a finished job writes.

Each statement lets go of the GIL and may wait a switch interval to take it back beside the gRPC
edge thread (coordinator/store/sqlite.py's _tx), so a job's statements are the coordinator's
throughput under churn. Counted here with SQLite's own trace callback, on the store's connection,
in the coordinator's mode (writes deferred into one open group)."""

from __future__ import annotations

import sqlite3

import pytest

from coordinator.core.events import EventBus
from coordinator.store import sqlite_health
from coordinator.store.sqlite import SqliteJobStore
from coordinator.store.trends import TrendPoint, TrendQuery
from ringleader.errors import AlreadyExists
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb


@pytest.fixture
def store(tmp_path):
    s = SqliteJobStore(tmp_path / "jobs.sqlite")
    s.defer_commits(lambda: None)
    yield s
    s.close()


class Statements:
    def __init__(self, store: SqliteJobStore) -> None:
        self.seen: list[str] = []
        store._conn.set_trace_callback(self.seen.append)

    def during(self, fn) -> list[str]:
        """The statements `fn` ran, but for the BEGIN of the turn's group (once per turn)."""
        self.seen.clear()
        fn()
        return [s for s in self.seen if s != "BEGIN"]


def test_a_new_job_is_one_statement_and_a_repeat_is_refused(store):
    count = Statements(store)
    job = pb.Job(id="j1", state=pb.QUEUED, created_at=1.0)
    job.spec.collective.op = "all_reduce"
    assert len(count.during(lambda: store.create(job))) == 1
    with pytest.raises(AlreadyExists, match="job j1 already exists"):
        store.create(job)
    assert store.get("j1").state == pb.QUEUED
    again = pb.Job(id="j2", state=pb.QUEUED, created_at=2.0, request_id="r1")
    assert len(count.during(lambda: store.create(again))) == 1  # a request id's own key tells a repeat
    with pytest.raises(AlreadyExists, match="request r1 already created job j2"):
        store.create(pb.Job(id="j3", state=pb.QUEUED, created_at=3.0, request_id="r1"))
    assert [j.id for j in store.list()] == ["j2", "j1"]


def test_a_trend_point_of_three_hosts_is_one_statement_and_sums_as_rows_did(store):
    count = Statements(store)
    p = TrendPoint(key="k", gpu_model="H100", op="all_reduce", link="cross", at=7200.0, busbw_gbps=10.0, job_id="a",
                   hosts=("h1", "h2", "h3"))
    assert len(count.during(lambda: store.add_trend(p))) == 1
    store.add_trend(TrendPoint(**{**p.__dict__, "busbw_gbps": 30.0, "job_id": "b", "hosts": ("h1", "h1")}))
    fleet = store.trend(TrendQuery(since=7200.0, until=10800.0))
    assert [(b.n, b.min_gbps, b.max_gbps) for b in fleet] == [(2, 10.0, 30.0)]
    for host, n in (("h1", 2), ("h2", 1), ("h3", 1)):
        [b] = store.trend(TrendQuery(since=7200.0, until=10800.0, host=host))
        assert b.n == n, host


def test_a_baseline_written_is_read_back_without_a_statement(store):
    count = Statements(store)
    e = pb.BaselineEntry(key="k1", median_busbw_gbps=5.0)
    store.put_baseline(e)
    assert count.during(lambda: store.baseline("k1")) == []
    got = store.baseline("k1")
    got.median_busbw_gbps = 99.0  # the caller's copy: what the store answers next is unchanged
    assert store.baseline("k1").median_busbw_gbps == 5.0
    assert len(count.during(lambda: store.baseline("absent"))) == 1
    assert count.during(lambda: store.baseline("absent")) == []  # its absence is kept too
    store.put_baseline(pb.BaselineEntry(key="absent", median_busbw_gbps=1.0))
    assert store.baseline("absent").median_busbw_gbps == 1.0


def test_baselines_kept_are_bounded_and_the_rest_read_from_the_table(store, monkeypatch):
    monkeypatch.setattr(sqlite_health, "BASELINES_KEPT", 3)
    for i in range(5):
        store.put_baseline(pb.BaselineEntry(key=f"k{i}", median_busbw_gbps=float(i)))
    assert len(store._baselines_kept) == 3
    count = Statements(store)
    assert len(count.during(lambda: store.baseline("k0"))) == 1  # let go of: read again, and right
    assert store.baseline("k0").median_busbw_gbps == 0.0
    assert [store.baseline(f"k{i}").median_busbw_gbps for i in range(5)] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_a_failed_commit_forgets_the_baselines_it_held(store):
    store.put_baseline(pb.BaselineEntry(key="k", median_busbw_gbps=1.0))
    store.commit()
    store.put_baseline(pb.BaselineEntry(key="k", median_busbw_gbps=2.0))  # in the open group
    assert store.baseline("k").median_busbw_gbps == 2.0
    # The group's commit fails (a foreign key checked at commit), and rolls the group back.
    store._conn.execute("PRAGMA defer_foreign_keys = ON")
    store._conn.execute("INSERT INTO results (job_id, idx, blob) VALUES ('nobody', 0, x'')")
    with pytest.raises(sqlite3.IntegrityError):
        store.commit()
    assert store.baseline("k").median_busbw_gbps == 1.0


def test_a_job_created_here_records_its_first_event_without_reading_the_stored_ones(store):
    bus = EventBus(store)
    job = pb.Job(id="j2", state=pb.QUEUED, created_at=1.0)
    store.create(job)
    bus.created("j2")
    count = Statements(store)
    state = pb.JobEvent(job_id="j2", state=pb.StateChange(state=pb.QUEUED))
    assert len(count.during(lambda: bus.record(state, job))) == 1
    assert state.seq == 1
    # A bus that did not create the job (a restarted coordinator) reads where the job's events are.
    later = pb.JobEvent(job_id="j2", state=pb.StateChange(state=pb.RUNNING))
    EventBus(store).record(later, job)
    assert later.seq == 2
    assert [e.seq for e in store.events("j2")] == [1, 2]


ONE_RANK = pb.JobSpec(world_size=1, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))


def coordinator(store, workers: int):
    """The facade over `store` with CPU workers w0.. registered (no loop: each input's placement
    pass runs at once); returns it and their connections."""
    from coordinator.shell.facade import Coordinator

    core = Coordinator(store)
    return core, [core.register(wpb.Register(worker_id=f"w{i}", host="h1", address=f"10.0.0.{i + 1}", backend="gloo",
                                             version="test", device=pb.Device(type="cpu", index=i, name="cpu")))
                  for i in range(workers)]


def report_row(core, conn, job_id: str) -> None:
    """Rank 0 streams one result row of its job."""
    core.on_message(conn, wpb.WorkerMessage(result=wpb.ResultReport(job_id=job_id, result=pb.SizeResult(
        op="all_reduce", dtype="float32", reduce_op="sum", size_bytes=1024, world_size=1, busbw_gbps=2.0))))


def test_a_cancel_answers_from_memory_unless_the_job_has_results(store):
    core, conns = coordinator(store, 2)
    bare, measured, queued = (core.submit(ONE_RANK) for _ in range(3))
    assert [core.get(j.id).state for j in (bare, measured, queued)] == [pb.RUNNING, pb.RUNNING, pb.QUEUED]
    report_row(core, next(c for c in conns if c.job_id == measured.id), measured.id)
    count = Statements(store)
    for job in (queued, bare):  # no results: the answer is the job as just stored, with no read
        answers: list[pb.Job] = []
        seen = count.during(lambda: answers.append(core.cancel(job.id)))
        assert not [s for s in seen if s.startswith("SELECT")], seen
        assert answers[0] == store.get(job.id) and answers[0].state == pb.CANCELLED
    answer = core.cancel(measured.id)  # a row stored: read back with it
    assert answer == store.get(measured.id) and len(answer.results) == 1


def test_the_log_of_a_rank_aborted_by_a_cancel_is_stored_without_a_read(store):
    """Its Done comes after the job ended: the members it is checked against come from memory."""
    core, (conn,) = coordinator(store, 1)
    job = core.submit(ONE_RANK)
    assert conn.job_id == job.id
    core.cancel(job.id)
    count = Statements(store)
    aborted = wpb.JobDone(job_id=job.id, rank=0, ok=False, failure=wpb.ABORTED, error="aborted", log="the rank's log")
    seen = count.during(lambda: core.on_message(conn, wpb.WorkerMessage(done=aborted)))
    assert [s.split()[0] for s in seen] == ["INSERT"], seen  # the rank log, nothing read
    assert store.rank_logs(job.id) == {0: "the rank's log"}
    assert conn.state == pb.IDLE


def test_a_queued_or_running_job_without_rows_is_read_from_memory(store):
    """What GetJob and every submit's answer read: the job as stored, with no statement unless it
    has result rows (held in the store only) or has ended."""
    core, (conn,) = coordinator(store, 1)
    two_sizes = pb.JobSpec(world_size=1, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024, 2048], iters=1))
    running, queued = core.submit(two_sizes), core.submit(two_sizes)
    count = Statements(store)

    def live_fields_cleared(job: pb.Job) -> pb.Job:  # the waiting reason and progress are memory's
        job.ClearField("reason")
        job.ClearField("progress")
        return job

    for job in (running, queued):
        answers: list[pb.Job] = []
        assert count.during(lambda: answers.append(core.get(job.id))) == []
        assert live_fields_cleared(answers[0]) == live_fields_cleared(store.get(job.id))
    assert core.get(queued.id).reason == "needs 1 workers, 0 idle"
    report_row(core, conn, running.id)
    seen = count.during(lambda: core.get(running.id))
    assert any(s.startswith("SELECT blob FROM results") for s in seen), seen  # a row: read with it
    assert len(core.get(running.id).results) == 1


def test_a_new_request_id_is_told_without_a_statement_and_a_known_one_is_found(tmp_path):
    """Every submit with an idempotency key asks whether it is new."""
    first = SqliteJobStore(tmp_path / "jobs.sqlite")
    first.create(pb.Job(id="j1", state=pb.QUEUED, created_at=1.0, request_id="r1"))
    first.close()
    store = SqliteJobStore(tmp_path / "jobs.sqlite")  # a restart: the ids stored before count
    try:
        store.defer_commits(lambda: None)
        assert store.job_for_request("r1") == "j1"
        count = Statements(store)
        assert count.during(lambda: store.job_for_request("r-new")) == []
        store.create(pb.Job(id="j2", state=pb.QUEUED, created_at=2.0, request_id="r2"))
        assert store.job_for_request("r2") == "j2"  # created after the ids were loaded
    finally:
        store.close()
