"""The SQLite store's writer (coordinator/store/sqlite_writer.py), a process of its own, sends a
run of one statement as multi-row statements: the database it leaves is the one the row-by-row
store leaves, in far fewer statements; a writer process that dies fails its group, and the next
group is written by a new one."""

from __future__ import annotations

import sqlite3
import time

import pytest

from coordinator.store.sqlite import SqliteJobStore
from coordinator.store.sqlite_behind import SqliteBehindStore
from coordinator.store.sqlite_writer import chunks, statements, transaction
from coordinator.store.trends import TrendPoint
from ringleader.v1 import jobs_pb2 as pb

TABLES = {
    "jobs": "SELECT id, state, op, created_at, job, request_id FROM jobs ORDER BY seq",
    "results": "SELECT job_id, idx, blob FROM results ORDER BY job_id, idx",
    "events": "SELECT job_id, seq, blob FROM events ORDER BY job_id, n",  # n: its order per job
    "rank_logs": "SELECT job_id, rank, text FROM rank_logs ORDER BY job_id, rank",
    "trend_hours": "SELECT * FROM trend_hours ORDER BY host, key, hour",
    "worker_health": "SELECT * FROM worker_health ORDER BY worker_id",
    "worker_credentials": "SELECT * FROM worker_credentials ORDER BY worker_id",
}


def a_turn_of_work(store, jobs: int = 300) -> None:
    """Writes as a draining coordinator makes them, several to one key within the group."""
    for i in range(jobs):
        job = pb.Job(id=f"j{i:04d}", state=pb.QUEUED, created_at=float(i), request_id=f"r{i}" if i % 2 else "")
        job.spec.world_size = 2
        job.spec.collective.op = "all_reduce"
        store.create(job)
        job.state, job.reason = pb.RUNNING, "placed"
        store.update(job)
        store.add_event(pb.JobEvent(job_id=job.id, seq=1, state=pb.StateChange(state=pb.RUNNING)))
        store.add_result(job.id, pb.SizeResult(op="all_reduce", size_bytes=8, busbw_gbps=float(i)))
        store.add_result(job.id, pb.SizeResult(op="all_reduce", size_bytes=16, busbw_gbps=float(i)))
        store.set_rank_log(job.id, 0, "first")
        store.set_rank_log(job.id, 0, f"replaced {i}")  # the same key twice: the last one stays
        if i % 3 == 0:  # a delete between inserts to the same key: their order holds
            store.clear_results(job.id)
            store.add_result(job.id, pb.SizeResult(op="all_reduce", size_bytes=32, busbw_gbps=float(i)))
        job.state, job.reason = pb.SUCCEEDED, f"done {i}"
        store.update(job)  # the same job twice in the group: the last state stays
        store.add_trend(TrendPoint(key=f"k{i % 4}", at=1_700_000_000.0 + i, busbw_gbps=float(i), job_id=job.id,
                                   hosts=("h1", "h2"), gpu_model="cpu", op="all_reduce", link="local"))
    for w in range(20):
        store.set_worker_health(f"w{w % 7}", pb.WorkerHealth(verdict=pb.HEALTHY, check="telemetry", figure=str(w)))
        store.set_worker_credential(f"w{w % 7}", f"digest {w}")
    store.forget_worker_credential("w3")


def dump(path) -> dict[str, list]:
    with sqlite3.connect(path) as conn:
        return {table: conn.execute(sql).fetchall() for table, sql in TABLES.items()}


def test_the_writer_leaves_the_database_the_row_by_row_store_leaves_in_a_few_dozen_statements(tmp_path):
    by_row = SqliteJobStore(tmp_path / "by-row.sqlite")
    a_turn_of_work(by_row)
    by_row.close()

    behind = SqliteBehindStore(tmp_path / "behind.sqlite")
    behind.defer_commits(lambda: None)  # the coordinator's mode: one group, committed by the writer
    a_turn_of_work(behind)
    group = list(behind._ops)
    behind.commit().result()
    behind.close()

    SqliteJobStore(tmp_path / "traced.sqlite").close()  # the schema
    sent: list[str] = []
    with sqlite3.connect(tmp_path / "traced.sqlite", isolation_level=None) as conn:
        conn.execute("PRAGMA foreign_keys=ON")
        conn.set_trace_callback(sent.append)
        transaction(conn, group, [])  # the group's transaction as the writer process runs it

    theirs, ours = dump(tmp_path / "by-row.sqlite"), dump(tmp_path / "behind.sqlite")
    assert {t: len(rows) for t, rows in ours.items()} == {t: len(rows) for t, rows in theirs.items()}
    assert ours == theirs
    assert len(ours["jobs"]) == 300 and len(ours["trend_hours"]) > 0
    # 300 jobs, about 4,200 rows, interleaved as a turn writes them: 40 statements when written
    assert len(sent) < 60, len(sent)


def test_chunks_are_powers_of_two_up_to_the_cap_and_cover_every_row():
    for n in (1, 2, 7, 256, 300, 1000):
        pieces = list(chunks(n))
        assert sum(size for _, size in pieces) == n and pieces[0][0] == 0
        assert all(size & (size - 1) == 0 and size <= 256 for _, size in pieces)


def test_an_unknown_shape_goes_row_by_row():
    rows = [(1,), (2,)]
    assert list(statements("DELETE FROM results WHERE idx > ?", rows)) == [("DELETE FROM results WHERE idx > ?", rows)]


def test_a_writer_process_that_dies_fails_its_group_and_the_next_group_is_written(tmp_path):
    store = SqliteBehindStore(tmp_path / "jobs.sqlite")
    store.defer_commits(lambda: None)
    try:
        store.create(pb.Job(id="a", state=pb.QUEUED, created_at=1.0))
        store.commit().result()
        store._writer._child.kill()  # dead between groups (as the OOM killer would): a new one writes b
        store._writer._child.wait()
        store.create(pb.Job(id="b", state=pb.QUEUED, created_at=2.0))
        store.commit().result()
        with sqlite3.connect(tmp_path / "jobs.sqlite", isolation_level=None) as other:
            other.execute("BEGIN IMMEDIATE")  # holds the write lock: the next group waits for it
            store.create(pb.Job(id="c", state=pb.QUEUED, created_at=3.0))
            later = store.commit()
            time.sleep(0.5)
            store._writer._child.kill()  # dead inside c's transaction
            with pytest.raises(sqlite3.OperationalError, match="writer process ended"):
                later.result(timeout=10)
            other.execute("ROLLBACK")
        store.create(pb.Job(id="d", state=pb.QUEUED, created_at=4.0))
        store.commit().result()  # a new process
    finally:
        store.close()
    with sqlite3.connect(tmp_path / "jobs.sqlite") as conn:
        assert [r[0] for r in conn.execute("SELECT id FROM jobs ORDER BY seq")] == ["a", "b", "d"]
