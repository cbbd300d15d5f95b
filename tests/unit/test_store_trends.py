"""The store's bandwidth trends (coordinator/store/api.py's add_trend, trend, trend_hours,
downsample_trends), run against every implementation (memory, SQLite, PostgreSQL: the session's
server, tests/conftest.py), and reopened from disk for SQLite."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from pgserver import schema_name

from coordinator.store.factory import open_store
from coordinator.store.memory import MemoryJobStore
from coordinator.store.sqlite import SqliteJobStore
from coordinator.store.trends import (DAY_H, GRAINS, HOSTS_AT_ONCE, HOUR_S, JOBS_KEPT, KEEP_H, WEEK_H, TrendPoint,
                                     TrendQuery)

KEY_A = "H100|all_reduce|float32|2^20|r8|h1|local|eager|"
KEY_B = "H100|all_gather|float32|2^20|r16|h2|cross|eager|"
T0 = 1_700_000_000 // HOUR_S * HOUR_S  # on an hour


@pytest.fixture(params=["memory", "sqlite", "sqlite-deferred", "postgres", "postgres-deferred"])
def store(request, tmp_path):
    if request.param.startswith("postgres"):
        s = open_store(request.getfixturevalue("postgres").new_schema(schema_name(request.node.nodeid)))
    else:
        s = MemoryJobStore() if request.param == "memory" else SqliteJobStore(tmp_path / "jobs.sqlite")
    if request.param.endswith("-deferred"):
        s.defer_commits(lambda: None)
    yield s
    s.close()


def downsample_all(store, now: float) -> int:
    """Call downsample_trends as the coordinator does, once a turn of its loop, each turn ending
    with its commit (waited for, as SubmitJob waits), until none is due: the calls that were."""
    calls = 0
    while store.downsample_trends(now):
        calls += 1
        durable = store.commit()
        if durable is not None:
            durable.result()
    return calls


def point(key: str, at: float, gbps: float, job: str, hosts=("h1",)) -> TrendPoint:
    model, op, *_, link = key.split("|")[:7]
    return TrendPoint(key=key, gpu_model=model, op=op, link=link, at=at, busbw_gbps=gbps, job_id=job, hosts=tuple(hosts))


def test_hours_sum_into_buckets_of_the_step(store):
    for i, gbps in enumerate([10.0, 20.0, 30.0, 40.0]):  # two hours, two results each
        store.add_trend(point(KEY_A, T0 + i * 1800 + 5, gbps, f"j{i}"))
    hourly = store.trend(TrendQuery(since=T0, until=T0 + 2 * HOUR_S))
    assert [(b.key, b.start, b.n, b.mean_gbps, b.min_gbps, b.max_gbps) for b in hourly] == [
        (KEY_A, T0, 2, 15.0, 10.0, 20.0), (KEY_A, T0 + HOUR_S, 2, 35.0, 30.0, 40.0)]
    two_hours = store.trend(TrendQuery(since=T0, until=T0 + 2 * HOUR_S, step_s=2 * HOUR_S))
    assert [(b.start, b.n, b.mean_gbps, b.min_gbps, b.max_gbps) for b in two_hours] == [(T0, 4, 25.0, 10.0, 40.0)]
    # The range is half-open and whole hours: the second hour alone.
    assert [b.n for b in store.trend(TrendQuery(since=T0 + HOUR_S, until=T0 + 2 * HOUR_S))] == [2]


def test_filters_by_key_fields_and_host(store):
    store.add_trend(point(KEY_A, T0, 10.0, "a", hosts=("h1",)))
    store.add_trend(point(KEY_B, T0, 5.0, "b", hosts=("h1", "h2")))
    q = dict(since=T0, until=T0 + HOUR_S)
    assert [b.key for b in store.trend(TrendQuery(**q))] == sorted([KEY_A, KEY_B])
    assert [b.key for b in store.trend(TrendQuery(**q, op="all_gather"))] == [KEY_B]
    assert [b.key for b in store.trend(TrendQuery(**q, link="local"))] == [KEY_A]
    assert [b.key for b in store.trend(TrendQuery(**q, gpu_model="H200"))] == []
    assert [b.key for b in store.trend(TrendQuery(**q, host="h2"))] == [KEY_B]
    assert [b.key for b in store.trend(TrendQuery(**q, host="h1"))] == sorted([KEY_A, KEY_B])
    assert store.trend(TrendQuery(**q, host="h3")) == []


def test_the_hours_behind_a_point_name_the_worst_job_first(store):
    for i in range(JOBS_KEPT + 3):
        store.add_trend(point(KEY_A, T0 + i, 10.0 - (i == 4) * 6, f"j{i}"))
    store.add_trend(point(KEY_A, T0 + HOUR_S, 9.0, "later"))
    hours = store.trend_hours(TrendQuery(since=T0, until=T0 + 2 * HOUR_S, key=KEY_A))
    assert [(h.start, h.worst_job, h.min_gbps) for h in hours] == [(T0, "j4", 4.0), (T0 + HOUR_S, "later", 9.0)]
    assert hours[0].n == JOBS_KEPT + 3 and hours[0].jobs == tuple(f"j{i}" for i in range(JOBS_KEPT))
    with pytest.raises(ValueError, match="key"):
        store.trend_hours(TrendQuery(since=T0, until=T0 + HOUR_S))


def test_a_bad_query_names_its_field():
    with pytest.raises(ValueError, match="step_s"):
        TrendQuery(since=T0, until=T0 + HOUR_S, step_s=60)
    with pytest.raises(ValueError, match="until"):
        TrendQuery(since=T0, until=T0)


def test_sqlite_keeps_trends_across_a_reopen(tmp_path):
    s = SqliteJobStore(tmp_path / "jobs.sqlite")
    s.add_trend(point(KEY_A, T0, 10.0, "a"))
    s.close()
    s = SqliteJobStore(tmp_path / "jobs.sqlite")
    try:
        assert [b.n for b in s.trend(TrendQuery(since=T0, until=T0 + HOUR_S))] == [1]
    finally:
        s.close()


DAY_S, WEEK_S = 24 * HOUR_S, 168 * HOUR_S


def test_old_history_is_downsampled_and_keeps_its_low_point(store):
    """A fleet's hourly rows older than a month become one a day, a host's older than a week one
    a day and older than a month one a week; counts, means, min, max and the worst job survive;
    rows older than KEEP_H go. Rows younger than a week stay hourly."""
    now = T0 + 60 * DAY_S
    day40 = (T0 + 20 * DAY_S) // DAY_S * DAY_S  # 40 days old: weekly per host, daily for the fleet
    day10 = (T0 + 50 * DAY_S) // DAY_S * DAY_S  # 10 days old: daily per host, hourly for the fleet
    for day in (day40, day10):
        for i, gbps in enumerate([10.0, 2.0, 30.0]):  # three hours of one day
            store.add_trend(point(KEY_A, day + i * HOUR_S + 5, gbps, f"d{day}-{i}"))
    store.add_trend(point(KEY_A, now - HOUR_S, 7.0, "recent"))
    store.add_trend(point(KEY_A, now - (KEEP_H + 2) * HOUR_S, 7.0, "ancient"))
    whole = TrendQuery(since=now - 400 * DAY_S, until=now)
    weekly = TrendQuery(since=now - 400 * DAY_S, until=now, step_s=WEEK_S)
    ancient = TrendQuery(since=now - (KEEP_H + 3) * HOUR_S, until=now - KEEP_H * HOUR_S)
    before = [(b.start, b.n, b.mean_gbps, b.min_gbps, b.max_gbps) for b in store.trend(weekly)]
    assert len(store.trend(ancient)) == 1

    calls = downsample_all(store, now)
    assert 0 < calls < 200  # bounded shares: windows of a week, 16 hosts at a time

    fleet = [(b.start, b.n, b.mean_gbps, b.min_gbps, b.max_gbps) for b in store.trend(whole)]
    assert fleet == [(day40, 3, 14.0, 2.0, 30.0)] + [
        (day10 + i * HOUR_S, 1, g, g, g) for i, g in enumerate([10.0, 2.0, 30.0])] + [(now - HOUR_S, 1, 7.0, 7.0, 7.0)]
    host = [(b.start, b.n, b.min_gbps) for b in store.trend(TrendQuery(**{**whole.__dict__, "host": "h1"}))]
    assert host == [(day40 // WEEK_S * WEEK_S, 3, 2.0), (day10, 3, 2.0), (now - HOUR_S, 1, 7.0)]
    # Drawn a week a point, the history reads as before.
    assert [(b.start, b.n, b.mean_gbps, b.min_gbps, b.max_gbps) for b in store.trend(weekly)] == before
    # The hours behind the merged point: the worst job first, the period's jobs kept.
    [day] = store.trend_hours(TrendQuery(since=day40, until=day40 + DAY_S, key=KEY_A))
    assert (day.start, day.n, day.min_gbps, day.worst_job) == (day40, 3, 2.0, f"d{day40}-1")
    assert day.jobs == tuple(f"d{day40}-{i}" for i in range(3))
    assert store.trend(ancient) == []
    # Nothing left to merge in this hour.
    assert not store.downsample_trends(now)
    assert [(b.start, b.n) for b in store.trend(whole)] == [(s, n) for s, n, *_ in fleet]


def test_downsampling_reaches_every_host_over_its_calls(store):
    """A call merges HOSTS_AT_ONCE hosts' rows at most; the calls that follow reach the others."""
    now = T0 + 60 * DAY_S
    day10 = (T0 + 50 * DAY_S) // DAY_S * DAY_S
    hosts = [f"h{i:02}" for i in range(HOSTS_AT_ONCE + 4)]
    for i in range(2):
        store.add_trend(point(KEY_B, day10 + (i + 1) * HOUR_S, 5.0 + i, f"j{i}", hosts=hosts))
    downsample_all(store, now)
    q = TrendQuery(since=day10, until=day10 + DAY_S)
    assert {h: [(b.start, b.n) for b in store.trend(TrendQuery(**{**q.__dict__, "host": h}))] for h in hosts} == {
        h: [(day10, 2)] for h in hosts}


KEYS = (KEY_A, KEY_B)


def ninety_days(now: float, hosts: list[str], seed: int = 29) -> list[TrendPoint]:
    """Two points a host in three days over 90 days, at random hours, most of one key (so a fleet's
    day holds more than JOBS_KEPT jobs): busbw from a few values (ties for the lowest), job ids that
    repeat (a period's jobs deduplicated), gangs of one or two hosts; at most JOBS_KEPT points an
    hour of a key (the hour's own jobs then are all its points' jobs)."""
    rng, out, per_hour = random.Random(seed), [], Counter()
    for day in range(90):
        for i, host in enumerate(hosts):
            for _ in range(rng.choice((0, 1, 1))):
                key, at = KEY_A if rng.random() < 0.75 else KEY_B, now - (day + 1) * DAY_S + rng.uniform(0, DAY_S)
                gang = (host, hosts[(i + 1) % len(hosts)]) if rng.random() < 0.3 else (host,)
                if per_hour[(key, at // HOUR_S)] == JOBS_KEPT:
                    continue
                per_hour[(key, at // HOUR_S)] += 1
                out.append(point(key, at, rng.choice((5.0, 7.5, 10.0, round(rng.uniform(4, 12), 3))),
                                 f"j{rng.randrange(60)}", hosts=gang))
    return out


def expected_rows(points: list[TrendPoint], now: float) -> dict:
    """What the stored rows must be after downsampling, from the rules alone (trends.py's GRAINS):
    (host, key, start) -> (n, mean, min, worst job, max, jobs); the worst job is the first lowest
    point in time order (the hour's first on a tie), the jobs the first JOBS_KEPT distinct ones."""
    hour = int(now // HOUR_S)
    merged_before = {g: (hour - age) // g * g for _, age, g in GRAINS}  # per grain: periods before this merged

    def start(host: str, h: int) -> int:
        if host and h // WEEK_H * WEEK_H < merged_before[WEEK_H]:
            return h // WEEK_H * WEEK_H
        age = 7 * DAY_H if host else 31 * DAY_H
        return h // DAY_H * DAY_H if h // DAY_H * DAY_H < (hour - age) // DAY_H * DAY_H else h

    rows: dict = {}
    for p in sorted(points, key=lambda p: int(p.at // HOUR_S)):  # stable: an hour's points as written
        for host in ("", *p.hosts):
            r = rows.setdefault((host, p.key, start(host, int(p.at // HOUR_S))), [0, 0.0, float("inf"), "", 0.0, []])
            r[0], r[1] = r[0] + 1, r[1] + p.busbw_gbps
            if p.busbw_gbps < r[2]:
                r[2], r[3] = p.busbw_gbps, p.job_id
            r[4] = max(r[4], p.busbw_gbps)
            if p.job_id not in r[5] and len(r[5]) < JOBS_KEPT:
                r[5].append(p.job_id)
    return {k: (n, pytest.approx(total / n, rel=1e-12), low, worst, high, tuple(jobs))
            for k, (n, total, low, worst, high, jobs) in rows.items()}


def stored_rows(store, now: float, hosts: list[str]) -> dict:
    rows = {}
    for host in ("", *hosts):
        for key in KEYS:
            q = TrendQuery(since=now - 100 * DAY_S, until=now, host=host, key=key)
            hours = {h.start: h for h in store.trend_hours(q)}
            for b in store.trend(q):  # hourly buckets: one a stored row
                h = hours[b.start]
                rows[(host, key, int(b.start // HOUR_S))] = (b.n, b.mean_gbps, b.min_gbps, h.worst_job, b.max_gbps, h.jobs)
    return rows


def test_ninety_days_downsampled_keep_every_period_s_aggregates(store):
    """90 days of a fleet's history: after downsampling, the stored rows are exactly the periods the
    rules name (the same on every store), each with its count, mean, min, max, worst job and jobs."""
    now = T0 + 90 * DAY_S + 5 * HOUR_S + 17
    hosts = [f"h{i:02}" for i in range(HOSTS_AT_ONCE + 2)]
    points = ninety_days(now, hosts)
    for p in points:
        store.add_trend(p)
    hourly = len(stored_rows(store, now, hosts))
    downsample_all(store, now)
    expected = expected_rows(points, now)
    assert len(expected) < 0.6 * hourly  # the rules merge much of it (2,288 hourly rows to 1,181)
    assert stored_rows(store, now, hosts) == expected
