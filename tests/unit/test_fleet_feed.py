"""The fleet view's server side (dashboard/fleet_view.py) on a real Coordinator facade: workers
registered and heard from as the gRPC servicer does, a clock the test moves."""

from __future__ import annotations

import asyncio
import gzip
import json
import time

import httpx
import pytest
from fastapi import FastAPI
from starlette.middleware.gzip import GZipMiddleware

from coordinator.shell.facade import Coordinator
from coordinator.store.memory import MemoryJobStore
from dashboard import fleet_view, server
from dashboard.fleet_view import POLL_S, STALE_S, FleetFeed, by_host, record
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb


class Clock:
    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t

    def tick(self, s: float = POLL_S) -> None:
        self.t += s


def register(core: Coordinator, worker_id: str, host: str, index: int):
    conn = core.register(wpb.Register(
        worker_id=worker_id, host=host, address="127.0.0.1", backend="gloo", version="test",
        device=pb.Device(type="cpu", index=index, name="cpu", memory_bytes=1 << 30)))
    conn.outbox.get_nowait()  # "registered"
    return conn


@pytest.fixture
def fleet():
    store = MemoryJobStore()
    core = Coordinator(store)
    conns = {f"{h}-{i}": register(core, f"{h}-{i}", h, i) for h in ("ha", "hb") for i in range(4)}
    clock = Clock()
    return core, conns, FleetFeed(core, clock), clock, store


def test_a_tab_gets_everything_first_then_only_what_changed(fleet):
    core, conns, feed, clock, _ = fleet
    feed.read()
    first = feed.since(0)
    assert first["full"] and {w["id"] for w in first["workers"]} == set(conns)
    assert all(w["st"] == "IDLE" and "ex" not in w for w in first["workers"])
    assert feed.since(first["version"]) == {**feed.since(first["version"]), "workers": [], "removed": []}

    # A heartbeat saying the executor stopped answering changes that worker's record only.
    core.on_message(conns["hb-2"], wpb.WorkerMessage(heartbeat=wpb.Heartbeat(executor=pb.EXECUTOR_UNRESPONSIVE)))
    clock.tick()
    feed.read()
    delta = feed.since(first["version"])
    assert not delta["full"] and delta["version"] == first["version"] + 1
    assert [(w["id"], w["ex"]) for w in delta["workers"]] == [("hb-2", "EXECUTOR_UNRESPONSIVE")]

    # Nothing new: a read changes no version.
    clock.tick()
    feed.read()
    assert feed.version == delta["version"]


def test_the_worker_list_is_read_at_most_once_a_poll_interval(fleet):
    core, conns, feed, clock, _ = fleet
    feed.read()
    core.disconnect(conns["ha-0"], "test")
    clock.tick(POLL_S / 2)
    feed.read()
    assert feed.records["ha-0"]["st"] == "IDLE"  # not read again yet
    clock.tick(POLL_S / 2)
    feed.read()
    assert feed.records["ha-0"]["st"] == "DISCONNECTED"


def test_a_version_it_no_longer_knows_gets_a_full_snapshot(fleet):
    core, conns, _, clock, _ = fleet
    feed = FleetFeed(core, clock, history=2)
    feed.read()
    tab = feed.version
    assert feed.since(tab + 5)["full"]  # a tab from before a coordinator restart
    for wid in ("ha-0", "ha-1"):
        core.disconnect(conns[wid], "test")
        clock.tick()
        feed.read()
    assert [w["id"] for w in feed.since(tab)["workers"]] == ["ha-0", "ha-1"]  # both changes still held
    core.disconnect(conns["ha-2"], "test")
    clock.tick()
    feed.read()
    assert feed.since(tab)["full"]  # the first change has left the history


def test_a_silent_worker_is_marked_stale(fleet):
    core, conns, feed, clock, _ = fleet
    core.on_message(conns["ha-3"], wpb.WorkerMessage(heartbeat=wpb.Heartbeat(executor=pb.EXECUTOR_OK)))
    clock.tick(STALE_S + 1)
    feed.read()
    assert all(r.get("stale") for r in feed.records.values())


def test_job_counts_are_the_whole_coordinators(fleet):
    core, conns, feed, clock, _ = fleet
    spec = pb.JobSpec(world_size=1, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))
    for _ in range(70):  # more than a page of the jobs table
        core.submit(spec)
    feed.read()
    assert feed.jobs == {"running": 8, "queued": 62}
    busy = [r for r in feed.records.values() if r["st"] == "BUSY"]
    assert len(busy) == 8 and all(r["job"] for r in busy)


def link_matrix_job(job_id: str, hosts: list[str]) -> pb.Job:
    n = len(hosts)
    gbps = [[-1.0 if a == b else 10.0 for b in range(n)] for a in range(n)]
    gbps[0][n - 1] = gbps[n - 1][0] = 0.5
    job = pb.Job(id=job_id, state=pb.SUCCEEDED, created_at=time.time(), finished_at=time.time(),
                 spec=pb.JobSpec(world_size=n, link_matrix=pb.LinkMatrixSpec(size_bytes=1 << 20)),
                 workers=[pb.WorkerRef(rank=r, worker_id=f"w{r}", host=h) for r, h in enumerate(hosts)])
    job.link_matrix.size_bytes = 1 << 20
    job.link_matrix.matrix.extend(pb.P2PMatrixRow(gbps=row) for row in gbps)
    job.link_matrix.links.add(a=0, b=n - 1, gbps=0.5, ratio=0.05, flagged=True)
    job.link_matrix.links.add(a=0, b=1, gbps=10.0, ratio=1.0)
    return job


def test_the_latest_link_matrix_is_served_with_its_flagged_links(fleet):
    core, conns, feed, clock, store = fleet
    store.create(link_matrix_job("lm1", ["ha", "ha", "hb", "hb"]))
    feed.read()
    assert feed.since(0)["links_job"] == "lm1"
    links = feed.links()
    assert links["by"] == "rank" and links["labels"] == ["w0", "w1", "w2", "w3"]
    assert links["matrix"][0][3] == 0.5
    assert [(f["a"], f["b"], f["ratio"]) for f in links["flagged"]] == [(0, 3, 0.05)]


def test_a_large_matrix_is_shown_host_by_host_with_the_slowest_link():
    ranks = [{"worker_id": f"w{r}", "host": h} for r, h in enumerate(["ha", "ha", "hb", "hb"])]
    m = [[-1, 9, 8, 7], [9, -1, 6, 0.5], [8, 6, -1, 9], [7, 0.5, 9, -1]]
    hosts, out = by_host(ranks, m)
    assert hosts == ["ha", "hb"]
    assert out == [[9, 0.5], [0.5, 9]]


def test_a_waiting_tab_is_answered_at_the_next_change(fleet):
    core, conns, feed, clock, _ = fleet

    async def main() -> dict:
        first = await feed.next(0, 0)
        waiting = asyncio.ensure_future(feed.next(first["version"], 30))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # nothing changed: the answer waits
        core.disconnect(conns["hb-0"], "test")
        clock.tick()
        feed.read()
        return await asyncio.wait_for(waiting, 5)

    got = asyncio.run(main())
    assert [(w["id"], w["st"]) for w in got["workers"]] == [("hb-0", "DISCONNECTED")]


def test_a_record_carries_the_verdict_and_its_evidence_and_leaves_out_the_heartbeat_time(fleet):
    core, conns, *_ = fleet
    conn = conns["hb-3"]
    conn.executor_health, conn.last_heartbeat_wall = pb.EXECUTOR_STOPPED, 100.0
    health = pb.WorkerHealth(verdict=pb.UNHEALTHY, check="sdc_check", figure="checksum 9f3e", expected="majority 1a2b",
                             at=90.0, job_id="j1", recheck_at=400.0)
    r = record(conn, pb.QUARANTINED, health, now=101.0)
    assert r == {"id": "hb-3", "host": "hb", "dev": "cpu", "type": "cpu", "idx": 3, "st": "QUARANTINED",
                 "ex": "EXECUTOR_STOPPED", "v": "UNHEALTHY", "check": "sdc_check", "fig": "checksum 9f3e",
                 "exp": "majority 1a2b", "at": 90.0, "vjob": "j1", "cord": False, "re": 400.0}
    # A later heartbeat alone changes nothing a tab is sent; a silent worker is marked stale.
    conn.last_heartbeat_wall = 101.0
    assert record(conn, pb.QUARANTINED, health, now=101.5) == r
    assert record(conn, pb.IDLE, None, now=101.0 + STALE_S + 1) == {
        "id": "hb-3", "host": "hb", "dev": "cpu", "type": "cpu", "idx": 3, "st": "IDLE", "ex": "EXECUTOR_STOPPED", "stale": True}


def test_a_full_answer_is_the_records_kept_json_and_follows_each_change(fleet):
    core, conns, feed, clock, _ = fleet
    feed.read()
    first = feed.since(0)
    assert json.loads(feed.body(first)) == first
    assert feed.body(feed.since(0)) is feed.body(feed.since(0))  # kept for the version
    core.on_message(conns["ha-1"], wpb.WorkerMessage(heartbeat=wpb.Heartbeat(executor=pb.EXECUTOR_STOPPED)))
    core.disconnect(conns["hb-3"], "test")
    clock.tick()
    feed.read()
    full = feed.since(0)
    assert json.loads(feed.body(full)) == full
    shown = {w["id"]: w for w in json.loads(feed.body(full))["workers"]}
    assert shown["ha-1"]["ex"] == "EXECUTOR_STOPPED" and shown["hb-3"]["st"] == "DISCONNECTED"
    delta = feed.since(first["version"])
    assert json.loads(feed.body(delta)) == delta


def test_what_json_cannot_carry_is_replaced_not_refused(fleet):
    core, conns, feed, clock, _ = fleet
    feed.read()
    feed.records["ha-0"] = {**feed.records["ha-0"], "at": float("nan"), "host": "h\ud800"}
    feed._encoded["ha-0"] = fleet_view.encode(feed.records["ha-0"])
    feed._full = (-1, b"")
    shown = {w["id"]: w for w in json.loads(feed.body(feed.since(0)))["workers"]}
    assert shown["ha-0"]["at"] is None and shown["ha-0"]["host"] == "h\\ud800"


def test_a_record_is_built_again_only_when_what_it_is_made_of_changes(fleet, monkeypatch):
    core, conns, feed, clock, _ = fleet
    feed.read()
    built = []
    real_record = fleet_view.record
    monkeypatch.setattr(fleet_view, "record", lambda conn, *a: built.append(conn.worker_id) or real_record(conn, *a))
    for conn in conns.values():  # heartbeats alone: nothing a tab is sent
        core.on_message(conn, wpb.WorkerMessage(heartbeat=wpb.Heartbeat()))
    clock.tick()
    feed.read()
    assert built == []
    # A verdict (the book puts a new record), a cordon and a disconnection each rebuild theirs.
    core.fleet.book.record({"ha-2": pb.WorkerHealth(verdict=pb.SUSPECT, check="link_matrix", at=clock())})
    core.cordon("hb-1", True)
    core.disconnect(conns["ha-3"], "test")
    clock.tick()
    feed.read()
    assert sorted(built) == ["ha-2", "ha-3", "hb-1"]
    shown = {w["id"]: w for w in json.loads(feed.body(feed.since(0)))["workers"]}
    assert (shown["ha-2"]["v"], shown["hb-1"]["st"], shown["ha-3"]["st"]) == ("SUSPECT", "QUARANTINED", "DISCONNECTED")
    # Silence past STALE_S makes a worker stale without any message.
    clock.tick(fleet_view.STALE_S + 1)
    conns["hb-0"].last_heartbeat_wall = clock() - fleet_view.STALE_S - 1
    feed.read()
    assert {w["id"]: w for w in feed.since(0)["workers"]}["hb-0"].get("stale") is True


def test_a_full_answer_is_sent_gzipped_once_per_version_and_follows_each_change(fleet):
    core, conns, feed, clock, _ = fleet
    app = FastAPI()
    app.include_router(fleet_view.router(feed))
    served = GZipMiddleware(app, minimum_size=server.GZIP_MIN_BYTES, compresslevel=server.GZIP_LEVEL)  # as served

    async def get(url: str, encoding: str = "gzip") -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=served), base_url="http://c") as c:
            return await c.get(url, headers={"accept-encoding": encoding})

    first = asyncio.run(get("/api/v1/fleet?since=0"))
    assert first.headers["content-encoding"] == "gzip" and first.json() == feed.since(0)  # gzipped once
    assert feed.gzipped(feed.since(0)) is feed.gzipped(feed.since(0))  # kept for the version
    assert gzip.decompress(feed.gzipped(feed.since(0))) == feed.body(feed.since(0))
    plain = asyncio.run(get("/api/v1/fleet?since=0", "identity"))
    assert "content-encoding" not in plain.headers and plain.json() == first.json()

    core.disconnect(conns["hb-1"], "test")
    clock.tick()
    again = asyncio.run(get("/api/v1/fleet?since=0")).json()
    assert again["version"] == first.json()["version"] + 1
    assert {w["id"]: w for w in again["workers"]}["hb-1"]["st"] == "DISCONNECTED"
    delta = asyncio.run(get(f"/api/v1/fleet?since={first.json()['version']}")).json()
    assert not delta["full"] and [w["id"] for w in delta["workers"]] == ["hb-1"]
    assert feed.gzipped(feed.since(first.json()["version"])) is None  # changes only: the middleware's
