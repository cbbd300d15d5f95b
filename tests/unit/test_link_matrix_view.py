"""The bandwidth view's answer to "where": the fleet's latest link matrix host by host, each link
against its expectation (dashboard/link_history.py), and the hosts behind a key's low results
(dashboard/trends_api.py), read from a real SQLite store holding checks and trends as the
coordinator leaves them (bench/trends_history.py writes a 5,000-GPU fleet's link sweep)."""

from __future__ import annotations

import time

import pytest

from bench.trends_history import REGRESSED_DAYS, write_fleet_link_sweep, write_month
from coordinator.health.expectations import MIN_SAMPLES, History
from coordinator.store.sqlite import SqliteJobStore
from dashboard import link_history
from dashboard.link_history import HistorySnapshot, fleet_matrix, link_ratio
from dashboard.trends_api import worst_hosts
from ringleader.v1 import jobs_pb2 as pb

H100 = "NVIDIA H100 80GB HBM3"
BIG = 256 << 20  # a size the shipped same-host NVLink floor holds for


@pytest.fixture
def store(tmp_path):
    s = SqliteJobStore(tmp_path / "jobs.db")
    yield s
    s.close()


def check(job_id: str, hosts: list[str], links: list[dict], at: float, size: int = 512 << 10) -> pb.Job:
    """A finished link check over one worker per entry of `hosts` (rank order)."""
    job = pb.Job(id=job_id, state=pb.SUCCEEDED, created_at=at - 10, finished_at=at,
                 spec=pb.JobSpec(world_size=len(hosts), link_matrix=pb.LinkMatrixSpec(size_bytes=size)),
                 workers=[pb.WorkerRef(rank=r, worker_id=f"{h}-d{r}", host=h, device=f"cuda:{r}")
                          for r, h in enumerate(hosts)])
    job.link_matrix.size_bytes = size
    for link in links:
        job.link_matrix.links.add(**{"ratio": 1.0, **link})
    return job


def matrix(store, models=None, history=None) -> dict:
    now = time.time()
    return fleet_matrix(store, now - 86400, now + 1, models or {}, HistorySnapshot(history or History()))


def test_the_slowed_link_of_5000_workers_is_listed_first_naming_its_two_hosts(store):
    sweep = write_fleet_link_sweep(store, workers=5000)
    m = matrix(store)
    assert len(m["hosts"]) == sweep.hosts == 625 and m["checks"] == len(sweep.jobs) == 157
    first = m["worst"][0]
    assert (first["a"], first["b"]) == sweep.slow and first["job_id"] == sweep.slow_job
    assert first["low"] and first["source"] == "baseline" and first["ratio"] == pytest.approx(0.3)
    assert first["ranks"] == list(sweep.slow_ranks)
    assert m["low"] == 1  # the one slowed link, and nothing else below its expectation
    # The pair of a link at 1.4 x its baseline: its cell is its slowest link (within noise), not low.
    hosts = m["hosts"]
    fast = next(c for c in m["cells"] if (hosts[c[0]], hosts[c[1]]) == sweep.fast)
    assert 0.95 < fast[3] < 1.05 and fast[5] == 0
    assert [(hosts[c[0]], hosts[c[1]]) for c in m["cells"] if c[5]] == [sweep.slow]
    assert all(not w["low"] for w in m["worst"][1:])


def test_each_host_pair_shows_its_newest_check(store):
    now = time.time()
    store.create(check("old-slow", ["h0", "h1"], [dict(a=0, b=1, gbps=1.0, ratio=0.2, baseline_ratio=0.2, flagged=True)], now - 600))
    store.create(check("new-fine", ["h0", "h1"], [dict(a=0, b=1, gbps=5.0, baseline_ratio=1.0)], now - 60))
    store.create(check("new-slow", ["h2", "h3"], [dict(a=0, b=1, gbps=1.0, ratio=0.2, baseline_ratio=0.2, flagged=True)], now - 30))
    store.create(check("old-fine", ["h2", "h3"], [dict(a=0, b=1, gbps=5.0, baseline_ratio=1.0)], now - 900))
    # A link well above its baseline is clean: not low, not listed.
    store.create(check("fast", ["h4", "h5"], [dict(a=0, b=1, gbps=7.0, ratio=1.4, baseline_ratio=1.4)], now - 90))
    m = matrix(store)
    assert [(w["a"], w["b"], w["job_id"]) for w in m["worst"]] == [("h2", "h3", "new-slow")]
    assert m["jobs"] == ["new-slow", "new-fine", "fast"] and m["as_of"] == pytest.approx(now - 30)
    assert m["job_at"] == [pytest.approx(now - 30), pytest.approx(now - 60), pytest.approx(now - 90)]
    assert sorted(m["jobs"][c[7]] for c in m["cells"]) == ["fast", "new-fine", "new-slow"]
    assert [c[3:6] for c in m["cells"] if m["jobs"][c[7]] == "fast"] == [[1.4, 0, 0]]


def test_without_a_baseline_a_link_is_judged_by_its_history_and_its_floor():
    history = History()
    same = check("j", ["h0", "h0"], [], 0, size=BIG)
    models = {"h0-d0": H100, "h0-d1": H100}
    link = pb.LinkRow(a=0, b=1, gbps=200.0, ratio=1.0)
    same.link_matrix.links.append(link)
    from coordinator.health import expectations
    fig = next(f for f in expectations.figures(same, models, history.floors) if f.measured)
    # No history yet: the shipped NVLink floor (150 GB/s for H100 SXM at this size) judges it.
    ratio, expected, source, low = link_ratio(link, fig, HistorySnapshot(history))
    assert (source, expected, low) == ("floor", 150.0, False) and ratio == pytest.approx(200 / 150)
    # A history of 300 GB/s: 200 is 0.67 of it, above the 0.6 band: not low, its ratio said.
    for _ in range(MIN_SAMPLES):
        history.learn(fig.key, 300.0)
    ratio, expected, source, low = link_ratio(link, fig, HistorySnapshot(history))
    assert (source, expected, low) == ("history", 300.0, False) and ratio == pytest.approx(2 / 3)
    # 160 GB/s: above the floor, below 0.6 of the history: low, by the history.
    slow = pb.LinkRow(a=0, b=1, gbps=160.0, ratio=1.0)
    assert link_ratio(slow, fig, HistorySnapshot(history))[2:] == ("history", True)
    # A history learnt slow (100 GB/s) does not clear a link below the floor: the floor says it.
    learnt_slow = History()
    for _ in range(MIN_SAMPLES):
        learnt_slow.learn(fig.key, 100.0)
    low_link = pb.LinkRow(a=0, b=1, gbps=90.0, ratio=1.0)
    assert link_ratio(low_link, fig, HistorySnapshot(learnt_slow))[2:] == ("floor", True)
    # The baseline (LinkRow.baseline_ratio), once set, judges beside them.
    based = pb.LinkRow(a=0, b=1, gbps=200.0, ratio=1.0, baseline_ratio=0.5)
    assert link_ratio(based, fig, HistorySnapshot(history))[2:] == ("baseline", True)


def test_with_no_expectation_the_checks_own_peers_judge_and_above_one_is_clean():
    fast = pb.LinkRow(a=0, b=1, gbps=7.0, ratio=1.4)
    slow = pb.LinkRow(a=0, b=1, gbps=1.0, ratio=0.2, flagged=True)
    assert link_ratio(fast, None, HistorySnapshot(History())) == (1.4, 5.0, "peers", False)
    assert link_ratio(slow, None, HistorySnapshot(History()))[2:] == ("peers", True)


def test_the_matrix_judges_same_host_links_by_the_registered_model(store):
    now = time.time()
    store.create(check("nv", ["h0", "h0", "h1", "h1"], [dict(a=0, b=1, gbps=90.0), dict(a=2, b=3, gbps=300.0),
                                                        dict(a=0, b=2, gbps=20.0)], now - 5, size=BIG))
    models = {f"{h}-d{r}": H100 for r, h in enumerate(["h0", "h0", "h1", "h1"])}
    m = matrix(store, models)
    assert [(w["a"], w["b"], w["source"], w["low"]) for w in m["worst"]] == [("h0", "h0", "floor", True)]
    # Unknown models (no worker registered): no floor, the peers' ratio (1.0 each) judges.
    assert matrix(store)["low"] == 0


def test_the_hosts_behind_a_keys_low_results_are_listed_the_regressed_host_first(store):
    store.defer_commits(lambda: None)
    history = write_month(store, workers=80, days=10)
    store.commit()
    out = worst_hosts(store, history.key, history.until - 10 * 86400, history.until)
    assert out["low_hours"] == REGRESSED_DAYS and out["jobs_gone"] == 0
    assert [h["host"] for h in out["hosts"]] == [history.host]
    assert out["hosts"][0]["low_hours"] == REGRESSED_DAYS and out["hosts"][0]["job_id"] in history.jobs
    # Another key (nothing low): no host.
    other = next(e.key for e in store.baselines() if e.key != history.key)
    assert worst_hosts(store, other, history.until - 10 * 86400, history.until)["hosts"] == []


def test_a_check_read_is_bounded(store):
    now = time.time()
    for i in range(5):
        store.create(check(f"c{i}", [f"a{i}", f"b{i}"], [dict(a=0, b=1, gbps=5.0)], now - 100 + i))
    assert len(list(link_history.link_matrix_jobs(store, now - 3600, now, 3))) == 3
    assert fleet_matrix(store, now - 3600, now, {}, HistorySnapshot(History()), max_jobs=2)["checks"] == 2
