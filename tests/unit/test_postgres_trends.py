"""The PostgreSQL store's trend downsampling (coordinator/store/postgres_trends.py) where it differs
from the other stores: a share goes to the writer with the turn's group, so the caller never waits
for the server; it is fenced as the group is; its failure is its own. A real PostgreSQL
(tests/conftest.py); what downsampling keeps is tests/unit/test_store_trends.py's, on every store.
And the dashboard's trend pages, whose store reads wait for that server: off the loop."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import psycopg
import pytest
from fastapi import FastAPI
from pgserver import schema_name

from coordinator.shell.facade import Coordinator
from coordinator.store import postgres_trends
from coordinator.store.factory import open_store
from coordinator.store.lease import Deposed, Lease
from coordinator.store.trends import HOUR_S, TrendPoint, TrendQuery
from dashboard import trends_api
from ringleader.v1 import jobs_pb2 as pb

KEY = "H100|all_reduce|float32|2^20|r8|h1|local|eager|"
DAY_S = 24 * HOUR_S
NOW = 1_700_000_000 // HOUR_S * HOUR_S + 60 * DAY_S
OLD_DAY = (NOW - 40 * DAY_S) // DAY_S * DAY_S  # merged: daily for the fleet, weekly for the host


@pytest.fixture
def dsn(postgres, request):
    return postgres.new_schema(schema_name(request.node.nodeid))


def three_hours(store) -> None:
    for i in range(3):
        store.add_trend(TrendPoint(key=KEY, gpu_model="H100", op="all_reduce", link="local",
                                   at=OLD_DAY + i * HOUR_S + 5, busbw_gbps=10.0 + i, job_id=f"j{i}", hosts=("h1",)))


def fleet_rows(store) -> list[tuple[float, int]]:
    return [(b.start, b.n) for b in store.trend(TrendQuery(since=OLD_DAY, until=OLD_DAY + DAY_S))]


def job(job_id: str) -> pb.Job:
    j = pb.Job(id=job_id, state=pb.QUEUED, created_at=1.0)
    j.spec.world_size = 1
    j.spec.collective.op = "all_reduce"
    return j


def test_a_share_goes_with_the_turns_group_and_the_caller_never_waits_for_the_server(dsn):
    groups: list[int] = []
    store = open_store(dsn)
    store.defer_commits(lambda: groups.append(1))  # the coordinator's end-of-turn commit, counted
    blocker = psycopg.connect(dsn, autocommit=True)
    try:
        three_hours(store)
        store.commit().result()
        blocker.execute("BEGIN")
        blocker.execute("LOCK TABLE trend_hours IN ACCESS EXCLUSIVE MODE")  # the server stalls the share
        t0 = time.monotonic()
        assert store.downsample_trends(NOW) and len(groups) == 2  # handed over with a group of its own
        later = store.commit()
        assert store.downsample_trends(NOW) and len(groups) == 2  # in flight: no second share meanwhile
        assert time.monotonic() - t0 < 0.5 and not later.done()
        blocker.execute("ROLLBACK")
        later.result(timeout=10)
        while store.downsample_trends(NOW):  # the next calls take up its state and go on
            store.commit().result()
        assert fleet_rows(store) == [(OLD_DAY, 3)]
    finally:
        blocker.close()
        store.close()


def test_a_failing_share_fails_alone_and_the_next_call_does_it_again(dsn, monkeypatch):
    store = open_store(dsn)
    store.defer_commits(lambda: None)
    try:
        three_hours(store)
        store.commit().result()
        monkeypatch.setattr(postgres_trends, "MERGE_SQL", "SELECT 1 / 0 FROM trend_hours WHERE {hosts}")  # as a bug would
        assert store.downsample_trends(NOW)
        store.create(job("beside"))  # the same group as the share
        store.commit().result()  # the group is written: the share's savepoint took its failure
        with pytest.raises(psycopg.errors.DivisionByZero):
            store.downsample_trends(NOW)  # the next call hears of it
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SELECT id FROM jobs").fetchall() == [("beside",)]
        assert fleet_rows(store) == [(OLD_DAY + i * HOUR_S, 1) for i in range(3)]  # nothing merged
        monkeypatch.undo()
        while store.downsample_trends(NOW):  # from the state before the failed share
            store.commit().result()
        assert fleet_rows(store) == [(OLD_DAY, 3)]
    finally:
        store.close()


def test_a_deposed_leaders_share_is_rolled_back(dsn):
    a = Lease(dsn, "a:1", ttl_s=2.0).start()
    store = open_store(dsn)
    b = None
    try:
        deadline = time.monotonic() + 10
        while not a.leading and time.monotonic() < deadline:
            time.sleep(0.02)
        assert a.leading
        store.fence_with(a)
        three_hours(store)  # not deferred: each write durable when it returns, as the lease allows
        a._stop.set()  # a stalls (a long pause, say); its lease expires in the database and b takes it
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE leader_lease SET expires_at = clock_timestamp()")
        b = Lease(dsn, "b:1", ttl_s=2.0).start()
        while not b.leading and time.monotonic() < deadline + 10:
            time.sleep(0.02)
        assert b.leading
        with pytest.raises(Deposed):
            store.downsample_trends(NOW)
        reader = open_store(dsn)
        try:
            assert fleet_rows(reader) == [(OLD_DAY + i * HOUR_S, 1) for i in range(3)]  # the share never landed
        finally:
            reader.close()
    finally:
        store.close()
        a.stop()
        if b is not None:
            b.stop()


@pytest.mark.parametrize("path, params, table", [
    ("/api/v1/trends", {"days": 1}, "trend_hours"),
    ("/api/v1/trends/jobs", {"key": KEY, "start": OLD_DAY}, "trend_hours"),
    ("/api/v1/trends/links", {"host": "h1"}, "jobs"),
])
def test_the_trend_pages_never_hold_the_loop_while_the_server_stalls(dsn, path, params, table):
    store = open_store(dsn)
    blocker = psycopg.connect(dsn, autocommit=True)
    blocker.execute("BEGIN")
    blocker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")

    # The server answers 1.5 s from now. Joined before the blocker closes: the call returns as soon
    # as the server has the ROLLBACK, maybe before the timer's thread has read the answer.
    release = threading.Timer(1.5, blocker.execute, ["ROLLBACK"])

    async def call_and_watch_the_loop():
        app = FastAPI()
        app.include_router(trends_api.router(Coordinator(store)))
        gaps, last = [], time.monotonic()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://rest") as client:
            release.start()
            call = asyncio.ensure_future(client.get(path, params=params))
            while not call.done():
                await asyncio.sleep(0.02)
                gaps.append(time.monotonic() - last)
                last = time.monotonic()
            return await call, sum(gaps), max(gaps)

    try:
        answer, waited, longest = asyncio.run(call_and_watch_the_loop())
    finally:
        if release.is_alive():
            release.join(10)
        blocker.close()
        store.close()
    assert answer.status_code == 200, answer.text
    assert waited > 1.2 and longest < 0.75, (waited, longest)  # the read waited; the loop kept turning
