"""The JobStore contract (coordinator/store/api.py), run against every implementation."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from pgserver import schema_name

from coordinator.store.api import JobStore
from coordinator.store.factory import open_store
from coordinator.store.memory import MemoryJobStore
from coordinator.store.schema import MIGRATIONS as SQL_MIGRATIONS
from coordinator.store.sqlite import SqliteJobStore
from ringleader.errors import AlreadyExists, NotFound
from ringleader.v1 import jobs_pb2 as pb


@pytest.fixture(params=["memory", "sqlite", "sqlite-deferred", "postgres", "postgres-deferred"])
def store(request, tmp_path):
    if request.param.startswith("postgres"):
        # The session's PostgreSQL (tests/conftest.py), a schema of this test's own.
        s: JobStore = open_store(request.getfixturevalue("postgres").new_schema(schema_name(request.node.nodeid)))
    elif request.param == "memory":
        s = MemoryJobStore()
    else:
        s = SqliteJobStore(tmp_path / "db" / "jobs.sqlite")  # parent dir does not exist yet: the store creates it
    if request.param.endswith("-deferred"):
        # The coordinator's mode: every test's writes stay in one open group (never committed
        # before close), so the whole contract holds for writes not yet committed.
        s.defer_commits(lambda: None)
    yield s
    s.close()


def make_job(job_id: str, op: str = "all_reduce", state: int = pb.QUEUED, t: float = 1.0) -> pb.Job:
    job = pb.Job(id=job_id, state=state, created_at=t)
    job.spec.world_size = 2
    job.spec.name = f"name-{job_id}"
    job.spec.collective.op = op
    job.spec.collective.sizes.extend([8, 1024])
    return job


def result(size: int) -> pb.SizeResult:
    return pb.SizeResult(op="all_reduce", size_bytes=size, time_us=size / 10, busbw_gbps=1.5)


def ids(jobs: list[pb.Job]) -> list[str]:
    return [j.id for j in jobs]


def test_open_store_picks_implementation(tmp_path):
    mem = open_store(":memory:")
    sql = open_store(str(tmp_path / "x.sqlite"))
    try:
        assert isinstance(mem, MemoryJobStore) and isinstance(sql, SqliteJobStore)
    finally:
        mem.close()
        sql.close()


def test_create_and_get_roundtrip(store):
    job = make_job("a")
    store.create(job)
    assert store.get("a") == job


def test_duplicate_create_fails(store):
    store.create(make_job("a"))
    with pytest.raises(AlreadyExists):
        store.create(make_job("a", op="broadcast"))
    assert store.get("a").spec.collective.op == "all_reduce"  # the first one is kept


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.get("nope"),
        lambda s: s.update(make_job("nope")),
        lambda s: s.add_event(pb.JobEvent(job_id="nope", seq=1)),
        lambda s: s.events("nope"),
        lambda s: s.add_result("nope", result(8)),
        lambda s: s.clear_results("nope"),
        lambda s: s.list(before_id="nope"),
        lambda s: s.set_rank_log("nope", 0, "x"),
        lambda s: s.rank_logs("nope"),
    ],
    ids=["get", "update", "add_event", "events", "add_result", "clear_results", "list_before",
         "set_rank_log", "rank_logs"],
)
def test_unknown_job_is_not_found(store, call):
    store.create(make_job("a"))
    with pytest.raises(NotFound, match="job nope not found"):
        call(store)


def test_results_in_order_and_clear(store):
    store.create(make_job("a"))
    store.create(make_job("b"))
    for size in (8, 64, 16, 1024):
        store.add_result("a", result(size))
    store.add_result("b", result(4))
    assert [r.size_bytes for r in store.get("a").results] == [8, 64, 16, 1024]
    assert store.get("a").results[2] == result(16)
    store.clear_results("a")
    assert list(store.get("a").results) == []
    assert [r.size_bytes for r in store.get("b").results] == [4]  # other jobs untouched
    store.add_result("a", result(32))  # appending works again after a clear
    assert [r.size_bytes for r in store.get("a").results] == [32]


def test_update_replaces_mutable_fields_only(store):
    store.create(make_job("a", t=100.0))
    store.add_result("a", result(8))
    new = make_job("a", op="broadcast", state=pb.RUNNING, t=999.0)  # other spec, other created_at
    new.reason = "placed"
    new.started_at = 101.0
    new.finished_at = 102.0
    new.workers.add(worker_id="w1", rank=0, host="h", device="cuda:0")
    new.workers.add(worker_id="w2", rank=1, host="h", device="cuda:1")
    new.backend = "nccl"
    new.progress.done = 1
    new.progress.total = 2
    new.warm_start = True
    new.results.append(result(4096))  # ignored: results change only via add/clear_results
    store.update(new)

    got = store.get("a")
    assert got.spec == make_job("a").spec and got.created_at == 100.0
    assert got.state == pb.RUNNING and got.reason == "placed"
    assert (got.started_at, got.finished_at) == (101.0, 102.0)
    assert [w.worker_id for w in got.workers] == ["w1", "w2"]
    assert got.backend == "nccl" and got.warm_start
    assert got.progress == pb.Progress(done=1, total=2)
    assert [r.size_bytes for r in got.results] == [8]
    # The op filter keeps following the stored spec, not the one passed to update.
    assert ids(store.list(op="all_reduce")) == ["a"] and store.list(op="broadcast") == []

    # A second update replaces (not merges) repeated and message fields.
    shrink = pb.Job(id="a", state=pb.QUEUED)
    store.update(shrink)
    got = store.get("a")
    assert got.state == pb.QUEUED and got.reason == "" and not got.warm_start
    assert list(got.workers) == [] and not got.HasField("progress")
    assert got.spec == make_job("a").spec and got.created_at == 100.0
    assert ids(store.list(states=[pb.QUEUED])) == ["a"]  # the state column follows updates


def test_list_newest_first_without_results(store):
    for i in range(5):
        store.create(make_job(f"j{i}", t=float(i)))
    store.add_result("j3", result(8))
    jobs = store.list()
    assert ids(jobs) == ["j4", "j3", "j2", "j1", "j0"]
    assert all(len(j.results) == 0 for j in jobs)
    assert jobs[0] == make_job("j4", t=4.0)


def test_list_order_is_submission_not_created_at(store):
    store.create(make_job("late", t=50.0))
    store.create(make_job("early", t=10.0))
    assert ids(store.list()) == ["early", "late"]


def test_list_state_filter(store):
    states = [pb.QUEUED, pb.RUNNING, pb.SUCCEEDED, pb.FAILED, pb.CANCELLED, pb.RUNNING]
    for i, st in enumerate(states):
        store.create(make_job(f"j{i}", state=st))
    assert ids(store.list(states=[pb.RUNNING])) == ["j5", "j1"]
    assert ids(store.list(states=[pb.SUCCEEDED, pb.FAILED, pb.CANCELLED])) == ["j4", "j3", "j2"]
    assert ids(store.list(states=(pb.QUEUED, pb.RUNNING))) == ["j5", "j1", "j0"]
    assert ids(store.list(states=[])) == ["j5", "j4", "j3", "j2", "j1", "j0"]  # empty: all


def test_list_op_filter(store):
    store.create(make_job("a", op="all_reduce"))
    store.create(make_job("b", op="broadcast"))
    store.create(make_job("c", op="all_reduce", state=pb.SUCCEEDED))
    assert ids(store.list(op="all_reduce")) == ["c", "a"]
    assert ids(store.list(op="broadcast")) == ["b"]
    assert ids(store.list(op="alltoall")) == []
    assert ids(store.list(op="all_reduce", states=[pb.QUEUED])) == ["a"]


def test_list_limit(store):
    for i in range(60):
        store.create(make_job(f"j{i:02}"))
    assert ids(store.list(limit=3)) == ["j59", "j58", "j57"]
    assert len(store.list(limit=0)) == 50  # 0 (unset in the request): the default
    assert len(store.list()) == 50


def test_list_limit_capped_one_above_the_largest_page(store):
    for i in range(1005):
        store.create(pb.Job(id=f"j{i}", state=pb.SUCCEEDED))
    assert len(store.list(limit=5000)) == 1001  # a pager asks one row more than a page


def test_list_before_id_pages(store):
    for i in range(7):
        store.create(make_job(f"j{i}", op="all_reduce" if i % 2 == 0 else "broadcast"))
    seen, before = [], ""
    while True:
        page = store.list(limit=3, before_id=before)
        if not page:
            break
        seen += ids(page)
        before = page[-1].id
    assert seen == [f"j{i}" for i in range(6, -1, -1)]
    assert ids(store.list(limit=2, before_id="j4")) == ["j3", "j2"]
    assert ids(store.list(before_id="j0")) == []
    # Paging combined with a filter: before_id may itself be filtered out.
    assert ids(store.list(op="all_reduce", before_id="j5")) == ["j4", "j2", "j0"]


def test_unfinished_oldest_first(store):
    states = [pb.RUNNING, pb.SUCCEEDED, pb.QUEUED, pb.FAILED, pb.CANCELLED, pb.QUEUED]
    for i, st in enumerate(states):
        store.create(make_job(f"j{i}", state=st, t=100.0 - i))  # created_at order is reversed
    store.add_result("j0", result(8))
    got = store.unfinished()
    assert ids(got) == ["j0", "j2", "j5"]
    assert [r.size_bytes for r in got[0].results] == [8]
    store.update(pb.Job(id="j0", state=pb.SUCCEEDED))
    store.update(pb.Job(id="j1", state=pb.QUEUED))
    assert ids(store.unfinished()) == ["j1", "j2", "j5"]


def test_events_in_order(store):
    store.create(make_job("a"))
    store.create(make_job("b"))
    sent = [
        pb.JobEvent(job_id="a", seq=1, time=1.0, state=pb.StateChange(state=pb.QUEUED)),
        pb.JobEvent(job_id="a", seq=2, time=2.0, state=pb.StateChange(state=pb.RUNNING)),
        pb.JobEvent(job_id="a", seq=3, time=3.0, progress=pb.Progress(done=1, total=2)),
        pb.JobEvent(job_id="a", seq=4, time=4.0, result=result(8)),
    ]
    store.add_event(sent[0])
    store.add_event(pb.JobEvent(job_id="b", seq=1, time=1.5))
    for e in sent[1:]:
        store.add_event(e)
    assert store.events("a") == sent
    assert [e.seq for e in store.events("b")] == [1]


def test_returned_and_given_objects_are_copies(store):
    job = make_job("a")
    store.create(job)
    job.spec.collective.op = "broadcast"  # mutate what was given to create
    job.state = pb.FAILED

    got = store.get("a")
    assert got.spec.collective.op == "all_reduce" and got.state == pb.QUEUED
    got.spec.world_size = 99
    got.workers.add(worker_id="x")
    assert store.get("a").spec.world_size == 2 and list(store.get("a").workers) == []

    listed = store.list()[0]
    listed.reason = "changed"
    store.unfinished()[0].spec.name = "changed"
    assert store.get("a").reason == "" and store.get("a").spec.name == "name-a"

    upd = pb.Job(id="a", state=pb.RUNNING)
    upd.progress.done = 1
    store.update(upd)
    upd.progress.done = 7
    assert store.get("a").progress.done == 1

    r = result(8)
    store.add_result("a", r)
    r.size_bytes = 1
    store.get("a").results[0].size_bytes = 2
    assert store.get("a").results[0].size_bytes == 8

    ev = pb.JobEvent(job_id="a", seq=1, state=pb.StateChange(state=pb.RUNNING))
    store.add_event(ev)
    ev.seq = 5
    store.events("a")[0].seq = 6
    assert store.events("a")[0].seq == 1


def test_rank_logs_replace_per_rank_and_stay_apart_from_the_job(store):
    store.create(make_job("a"))
    store.create(make_job("b"))
    assert store.rank_logs("a") == {}
    store.set_rank_log("a", 1, "rank one\n")
    store.set_rank_log("a", 0, "")  # an empty log is a log: the rank reported, silently
    store.set_rank_log("a", 1, "rerun \u00e9\n")  # a later one replaces the rank's earlier one
    store.set_rank_log("b", 0, "other job")
    assert store.rank_logs("a") == {0: "", 1: "rerun \u00e9\n"}
    assert list(store.rank_logs("a")) == [0, 1]
    assert store.rank_logs("b") == {0: "other job"}
    assert store.get("a") == make_job("a")  # the job itself carries no log


def test_request_id_names_one_job(store):
    first = make_job("a")
    first.request_id = "req-1"
    store.create(first)
    store.create(make_job("b"))  # no request id: never matched
    assert store.job_for_request("req-1") == "a"
    assert store.job_for_request("req-2") == "" and store.job_for_request("") == ""
    assert store.get("a").request_id == "req-1"
    again = make_job("c")
    again.request_id = "req-1"
    with pytest.raises(AlreadyExists, match="request req-1 already created job a"):
        store.create(again)
    with pytest.raises(NotFound):
        store.get("c")  # nothing of the refused job was kept
    store.create(make_job("d"))  # many jobs without a request id
    assert ids(store.list()) == ["d", "b", "a"]


# --- SQLite only ---------------------------------------------------------------------------


def test_sqlite_deferred_commits_group_writes_until_commit(tmp_path):
    path = tmp_path / "jobs.sqlite"
    s = SqliteJobStore(path)
    groups = []
    s.defer_commits(lambda: groups.append(1))
    outside = sqlite3.connect(path)  # another process's view of the file
    try:
        s.create(make_job("a"))
        s.add_event(pb.JobEvent(job_id="a", seq=1))
        assert groups == [1]  # one notice for the group, at its first write
        assert s.get("a") == make_job("a")  # visible to the store's own reads at once
        assert outside.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 0  # not yet durable
        with pytest.raises(AlreadyExists):
            s.create(make_job("a"))  # a failed write in the group ...
        with pytest.raises(NotFound):
            s.add_event(pb.JobEvent(job_id="ghost", seq=1))  # (one statement, no savepoint: its key refuses it)
        s.commit()  # ... does not spoil the rest of it
        assert outside.execute("SELECT id FROM jobs").fetchall() == [("a",)]
        assert [e.seq for e in s.events("a")] == [1]
        s.update(pb.Job(id="a", state=pb.RUNNING))
        assert groups == [1, 1]  # the next write opened the next group
        s.close()  # commits what is pending
        assert outside.execute("SELECT state FROM jobs").fetchone()[0] == pb.RUNNING
    finally:
        outside.close()


def test_sqlite_a_failed_commit_leaves_no_group_open(tmp_path):
    s = SqliteJobStore(tmp_path / "jobs.sqlite")
    groups = []
    s.defer_commits(lambda: groups.append(1))
    try:
        s.set_worker_credential("w-old", "digest-old")
        s.commit()
        s.create(make_job("a"))
        s.set_worker_credential("w-new", "digest-new")
        assert s.forget_worker_credential("w-old")
        # A foreign key checked only at COMMIT (an event of no job) makes the commit fail.
        s._conn.execute("PRAGMA defer_foreign_keys = ON")
        s._conn.execute("INSERT INTO events (job_id, seq, blob) VALUES ('ghost', 1, x'')")
        with pytest.raises(sqlite3.IntegrityError):
            s.commit()
        with pytest.raises(NotFound):
            s.get("a")  # the failed group is gone whole
        # and so are its credential writes, also from the copy the store answers from
        assert s.worker_credential("w-new") == "" and s.worker_credential("w-old") == "digest-old"
        s.create(make_job("b"))
        assert groups == [1, 1, 1]  # and the next write opened (and announced) a new one
        s.commit()
        assert ids(s.list()) == ["b"]
    finally:
        s.close()


def test_sqlite_deferred_checkpoints_run_on_their_own_thread(tmp_path, monkeypatch):
    import coordinator.store.sqlite_checkpoint as checkpoint

    monkeypatch.setattr(checkpoint, "CHECKPOINT_S", 0.05)
    path = tmp_path / "jobs.sqlite"
    s = SqliteJobStore(path)
    s.defer_commits(lambda: None)
    try:
        assert s._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        before = path.stat().st_size
        for i in range(200):
            s.create(make_job(f"j{i}"))
        s.commit()  # into the WAL only: the loop's thread never copies it back
        deadline = time.monotonic() + 10
        # The checkpoint thread copies the WAL into the database file, which grows.
        while path.stat().st_size <= before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert path.stat().st_size > before
    finally:
        s.close()
    assert not any(t.name == "sqlite-checkpoint" for t in threading.enumerate())


def test_sqlite_migrates_a_first_version_store(tmp_path):
    path = tmp_path / "jobs.sqlite"
    conn = sqlite3.connect(path)
    for stmt in SQL_MIGRATIONS[0]:
        conn.execute(stmt)
    conn.execute("PRAGMA user_version = 1")
    old = make_job("old")
    conn.execute("INSERT INTO jobs (id, state, op, created_at, job) VALUES (?, ?, ?, ?, ?)",
                 ("old", old.state, "all_reduce", 1.0, old.SerializeToString()))
    conn.commit()
    conn.close()
    s = SqliteJobStore(path)
    try:
        assert s.get("old") == old and s.job_for_request("x") == ""
        new = make_job("new")
        new.request_id = "x"
        s.create(new)
        assert s.job_for_request("x") == "new"
    finally:
        s.close()


def test_sqlite_survives_reopen(tmp_path):
    path = tmp_path / "jobs.sqlite"
    s = SqliteJobStore(path)
    s.create(make_job("a", t=5.0))
    s.create(make_job("b", state=pb.RUNNING))
    s.add_result("b", result(8))
    s.add_result("b", result(16))
    s.add_event(pb.JobEvent(job_id="b", seq=1, state=pb.StateChange(state=pb.RUNNING)))
    s.update(pb.Job(id="a", state=pb.SUCCEEDED, reason="done", finished_at=9.0))
    s.set_rank_log("b", 1, "kept")
    s.close()
    s.close()  # idempotent

    s = SqliteJobStore(str(path))
    try:
        a = s.get("a")
        assert a.state == pb.SUCCEEDED and a.reason == "done" and a.created_at == 5.0
        assert a.spec == make_job("a").spec
        assert [r.size_bytes for r in s.get("b").results] == [8, 16]
        assert [e.seq for e in s.events("b")] == [1]
        assert s.rank_logs("b") == {1: "kept"}
        assert ids(s.list()) == ["b", "a"] and ids(s.unfinished()) == ["b"]
        s.create(make_job("c"))  # submission order continues after the reopened rows
        assert ids(s.list()) == ["c", "b", "a"]
        with pytest.raises(AlreadyExists):
            s.create(make_job("a"))
    finally:
        s.close()


def test_sqlite_pragmas_and_schema_version(tmp_path):
    path = tmp_path / "jobs.sqlite"
    SqliteJobStore(path).close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent in file
        assert conn.execute("PRAGMA user_version").fetchone()[0] >= 1
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"jobs", "events", "results", "rank_logs"} <= tables
    finally:
        conn.close()
    s = SqliteJobStore(path)  # reopening an up-to-date schema migrates nothing and succeeds
    try:
        fk = s._conn.execute("PRAGMA foreign_keys").fetchone()[0]
        assert fk == 1
    finally:
        s.close()


def test_sqlite_rejects_newer_schema(tmp_path):
    path = tmp_path / "jobs.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    with pytest.raises(RuntimeError, match="newer"):
        SqliteJobStore(path)


def test_sqlite_upgrades_a_v1_database_keeping_its_jobs(tmp_path):
    from coordinator.store.schema import MIGRATIONS

    path = tmp_path / "jobs.sqlite"
    conn = sqlite3.connect(path)  # a database written before rank logs existed
    for stmt in MIGRATIONS[0]:
        conn.execute(stmt)
    conn.execute("INSERT INTO jobs (id, state, op, created_at, job) VALUES (?, ?, ?, ?, ?)",
                 ("old", pb.SUCCEEDED, "all_reduce", 1.0, make_job("old", state=pb.SUCCEEDED).SerializeToString()))
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    s = SqliteJobStore(path)
    try:
        assert s.get("old").state == pb.SUCCEEDED and s.rank_logs("old") == {}
        s.set_rank_log("old", 0, "after the upgrade")
        assert s.rank_logs("old") == {0: "after the upgrade"}
        assert s._conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    finally:
        s.close()


def test_worker_health_replaces_per_worker_and_is_a_copy(store):
    assert store.worker_health() == {}
    failed = pb.WorkerHealth(verdict=pb.UNHEALTHY, check="gpu_check", figure="1.0 TFLOP/s", at=5.0, recheck_at=65.0)
    store.set_worker_health("w1", failed)
    store.set_worker_health("w2", pb.WorkerHealth(verdict=pb.HEALTHY, check="sdc_check"))
    failed.figure = "changed after"  # the store kept its own copy
    store.set_worker_health("w2", pb.WorkerHealth(verdict=pb.SUSPECT, check="link_matrix"))
    got = store.worker_health()
    assert sorted(got) == ["w1", "w2"]
    assert got["w1"].figure == "1.0 TFLOP/s" and got["w1"].recheck_at == 65.0
    assert got["w2"].verdict == pb.SUSPECT and got["w2"].check == "link_matrix"
    got["w1"].verdict = pb.HEALTHY
    assert store.worker_health()["w1"].verdict == pb.UNHEALTHY


def test_update_keeps_a_check_outcome(store):
    store.create(make_job("c"))
    done = pb.Job(id="c", state=pb.SUCCEEDED)
    done.gpu_check.workers.add(rank=0, tflops=1.5, flagged=True)
    done.link_matrix.rounds = 3
    done.sdc_check.majority_checksum = "ab"
    store.update(done)
    got = store.get("c")
    assert got.gpu_check.workers[0].tflops == 1.5 and got.link_matrix.rounds == 3
    assert got.sdc_check.majority_checksum == "ab"


def test_sqlite_worker_health_survives_reopen(tmp_path):
    path = tmp_path / "jobs.sqlite"
    s = SqliteJobStore(path)
    s.set_worker_health("w1", pb.WorkerHealth(verdict=pb.UNHEALTHY, cordoned=True))
    s.close()
    s = SqliteJobStore(path)
    try:
        assert s.worker_health() == {"w1": pb.WorkerHealth(verdict=pb.UNHEALTHY, cordoned=True)}
    finally:
        s.close()


def test_worker_credentials_bind_replace_and_forget(store):
    assert store.worker_credential("w0") == ""
    store.set_worker_credential("w0", "digest-a")
    store.set_worker_credential("w1", "digest-b")
    assert (store.worker_credential("w0"), store.worker_credential("w1")) == ("digest-a", "digest-b")
    store.set_worker_credential("w0", "digest-c")  # re-bound after an operator's reset
    assert store.worker_credential("w0") == "digest-c"
    assert store.forget_worker_credential("w0") is True
    assert store.forget_worker_credential("w0") is False
    assert (store.worker_credential("w0"), store.worker_credential("w1")) == ("", "digest-b")


def test_worker_credentials_survive_reopening(tmp_path):
    path = tmp_path / "jobs.sqlite"
    first = SqliteJobStore(path)
    first.set_worker_credential("w0", "digest-a")
    first.close()
    again = SqliteJobStore(path)
    try:
        assert again.worker_credential("w0") == "digest-a"
    finally:
        again.close()
def baseline_entry(key: str, *samples: float) -> pb.BaselineEntry:
    return pb.BaselineEntry(key=key, op="all_reduce", samples=samples, median_busbw_gbps=samples[len(samples) // 2])


def test_baselines_put_replace_and_list_by_key(store):
    assert store.baseline("k1") is None and store.baselines() == []
    store.put_baseline(baseline_entry("k2", 1.0))
    store.put_baseline(baseline_entry("k1", 2.0, 3.0))
    store.put_baseline(baseline_entry("k2", 4.0))  # replaces
    assert [list(e.samples) for e in store.baselines()] == [[2.0, 3.0], [4.0]]
    got = store.baseline("k1")
    got.samples.append(99.0)  # the caller's copy: the store keeps what was put
    assert list(store.baseline("k1").samples) == [2.0, 3.0]


def test_sqlite_baselines_survive_reopen(tmp_path):
    path = tmp_path / "jobs.sqlite"
    s = SqliteJobStore(path)
    s.put_baseline(baseline_entry("k", 5.0, 6.0, 7.0))
    s.close()
    s = SqliteJobStore(path)
    try:
        assert s.baselines() == [baseline_entry("k", 5.0, 6.0, 7.0)]
    finally:
        s.close()


def test_sqlite_a_write_of_an_unfinished_job_is_one_statement(tmp_path):
    # The sqlite3 module lets go of the GIL in every statement, and taking it back beside the busy
    # gRPC edge thread can wait a switch interval: a job's update reads no row back, and an event
    # is one INSERT, its job's existence told by the foreign key (coordinator/store/resident.py).
    s = SqliteJobStore(tmp_path / "jobs.sqlite")
    s.defer_commits(lambda: None)
    try:
        s.create(make_job("a"))
        s.commit()
        sql: list[str] = []
        s._conn.set_trace_callback(sql.append)
        s.update(pb.Job(id="a", state=pb.RUNNING, started_at=2.0))
        s.add_event(pb.JobEvent(job_id="a", seq=1))
        assert [q.split()[0] for q in sql] == ["BEGIN", "UPDATE", "INSERT"], sql
        assert s.get("a").state == pb.RUNNING and s.get("a").started_at == 2.0
        s.update(pb.Job(id="a", state=pb.SUCCEEDED, finished_at=3.0))
        s.commit()
        del sql[:]
        s.update(pb.Job(id="a", state=pb.SUCCEEDED, finished_at=4.0, reason="again"))  # finished: read back
        assert [q.split()[0] for q in sql] == ["BEGIN", "SELECT", "UPDATE"], sql
        s.commit()
        reopened = SqliteJobStore(tmp_path / "jobs.sqlite")
        assert reopened.get("a").reason == "again" and reopened.get("a").finished_at == 4.0
        reopened.close()
    finally:
        s.close()


def test_hook_deliveries_replace_per_event_and_url_newest_first(store):
    assert store.hook_deliveries() == []
    first = pb.HooksDelivery(event_id="e1", url="http://a/", state="PENDING", attempts=1, first_at=10.0)
    store.put_hook_delivery(first)
    store.put_hook_delivery(pb.HooksDelivery(event_id="e1", url="http://b/", state="PENDING", first_at=10.0))
    store.put_hook_delivery(pb.HooksDelivery(event_id="e2", url="http://a/", state="PENDING", first_at=20.0))
    first.attempts = 99  # the store kept a copy
    store.put_hook_delivery(pb.HooksDelivery(event_id="e1", url="http://a/", state="DELIVERED", attempts=3,
                                             first_at=10.0, done_at=11.0))
    got = store.hook_deliveries()
    assert [(d.event_id, d.url) for d in got] == [("e2", "http://a/"), ("e1", "http://a/"), ("e1", "http://b/")]
    assert (got[1].state, got[1].attempts) == ("DELIVERED", 3)
    assert [d.event_id for d in store.hook_deliveries(limit=1)] == ["e2"]
