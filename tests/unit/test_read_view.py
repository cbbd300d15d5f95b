"""The edge's read view (coordinator/edge/read_view.py) against the core's own answers: the same
worker pages and tokens, the jobs as the core shows them once a turn has flushed, ended jobs kept
up to a bound while live ones stay, and the staleness it says. The view and its feed run on one
loop here (the feed's hand-over to the edge loop is a call_soon_threadsafe either way)."""

from __future__ import annotations

import asyncio
import functools

import pytest

from coordinator.shell.facade import Coordinator, Timings
from coordinator.edge import read_view
from coordinator.edge.read_feed import ReadFeed
from coordinator.edge.read_view import ReadView
from coordinator.store.memory import MemoryJobStore
from ringleader.errors import InvalidSpec, NotFound
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb


def register(core: Coordinator, worker_id: str, host: str, index: int) -> None:
    core.register(wpb.Register(worker_id=worker_id, host=host, address="10.0.0.1", backend="gloo", version="test",
                               device=pb.Device(type="cpu", index=index, name="cpu", memory_bytes=1 << 34)))


def spec(n: int) -> pb.JobSpec:
    return pb.JobSpec(world_size=n, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))


async def settled() -> None:
    for _ in range(5):  # the turn's flush, then the view's apply (both call_soon on this loop)
        await asyncio.sleep(0)


def run(test):
    return functools.wraps(test)(lambda *args, **kwargs: asyncio.run(test(*args, **kwargs)))


@run
async def test_worker_pages_and_tokens_are_the_cores():
    core = Coordinator(MemoryJobStore(), Timings())
    for i in range(23):
        register(core, f"w{i:02}", f"h{i % 3}", i // 3)
    core.cordon("w05", True)
    view = ReadView(core.store)
    feed = ReadFeed(core, view, asyncio.get_running_loop())
    feed.start()
    await settled()
    try:
        for states, limit in (((), 5), ((), 0), ((pb.IDLE,), 4), ((pb.QUARANTINED,), 3), ((pb.BUSY,), 2)):
            token, mine, theirs = "", [], []
            while True:
                got, next_token, age = await view.list_workers(states, limit, token)
                page = core.list_workers(states, limit, token)
                assert [w.worker_id for w in got] == [w.worker_id for w in page.workers]
                assert [w.state for w in got] == [w.state for w in page.workers]
                assert next_token == page.next_page_token and age < 1000
                mine += got
                theirs += page.workers
                if not (token := next_token):
                    break
            assert [w.health for w in mine] == [w.health for w in theirs]
        assert [w.worker_id for w in (await view.list_workers((pb.QUARANTINED,)))[0]] == ["w05"]
        with pytest.raises(InvalidSpec, match="page_token"):
            await view.list_workers((), 5, "not-a-token")
    finally:
        await feed.stop()


@run
async def test_jobs_follow_the_core_turn_by_turn_and_ended_ones_are_bounded(monkeypatch):
    monkeypatch.setattr(read_view, "KEEP_ENDED", 3)
    core = Coordinator(MemoryJobStore(), Timings())
    view = ReadView(core.store)
    feed = ReadFeed(core, view, asyncio.get_running_loop())
    feed.start()
    try:
        waiting = core.submit(spec(4))  # no workers: it stays queued
        ended = [core.submit(spec(1)) for _ in range(5)]
        for job in ended:
            core.cancel(job.id)
        await settled()
        got = await view.get_job(waiting.id)
        assert got.state == pb.QUEUED and got.reason == core.get(waiting.id).reason
        # The last KEEP_ENDED that ended are held; the rest are the store's (still answered).
        assert [j for j in view._jobs if j != waiting.id] == [j.id for j in ended[-3:]]
        first = await view.get_job(ended[0].id)
        assert first.state == pb.CANCELLED
        with pytest.raises(NotFound):
            await view.get_job("nosuchjob")
        page, _ = await view.list_jobs()
        assert [j.id for j in page.jobs] == [j.id for j in core.list_jobs().jobs]

        # Nothing handed over for a while (the feed stopped, as a held-up core hands nothing): the
        # view answers as it is and says how old it is; a job it never heard of is the store's.
        await feed.stop()
        later = core.submit(spec(4))
        await asyncio.sleep(0.2)
        assert view.age_ms() >= 200
        assert (await view.get_job(waiting.id)).read_view_age_ms >= 200
        assert later.id not in view._jobs
        assert (await view.get_job(later.id)).state == pb.QUEUED  # read from the store
    finally:
        await feed.stop()


@run
async def test_a_queued_jobs_reason_follows_the_fleet_without_an_event_of_its_own(monkeypatch):
    from coordinator.edge import read_feed
    monkeypatch.setattr(read_feed, "REASON_S", 0.0)
    core = Coordinator(MemoryJobStore(), Timings())
    register(core, "w0", "h0", 0)
    view = ReadView(core.store)
    feed = ReadFeed(core, view, asyncio.get_running_loop())
    feed.start()
    try:
        waiting = core.submit(spec(3))
        await settled()
        before = (await view.get_job(waiting.id)).reason
        assert before == core.get(waiting.id).reason and "1" in before
        register(core, "w1", "h1", 0)  # the fleet changed; the job had no event
        feed.flush(workers=True)  # the feed's clock tick
        await settled()
        after = (await view.get_job(waiting.id)).reason
        assert after == core.get(waiting.id).reason and after != before
    finally:
        await feed.stop()


def _fleet_watched() -> tuple[Coordinator, ReadView, ReadFeed, list[str]]:
    """A core with 300 workers, its view fed and freshened on this loop, and the ids of the
    workers the feed looks at (signs), in order, from now on (on the running loop)."""
    from coordinator.edge.read_feed import Freshen

    core = Coordinator(MemoryJobStore(), Timings())
    for i in range(300):
        register(core, f"w{i:03}", f"h{i % 30}", i // 30)
    view = ReadView(core.store)
    feed = ReadFeed(core, view, asyncio.get_running_loop())
    feed.start()
    view.fresh = Freshen(feed, asyncio.get_running_loop())
    looked: list[str] = []
    sign = feed._sign
    feed._sign = lambda conn: looked.append(conn.worker_id) or sign(conn)
    return core, view, feed, looked


@run
async def test_a_workers_change_without_a_job_event_is_read_at_once_and_the_scan_looks_at_a_share(monkeypatch):
    """A worker that registers, or whose changed heartbeat says its executor stopped, is in the
    next read (the registry marks it touched; no look at the whole fleet); its heartbeat time is
    read as the core last heard it; and the clock's scan looks at a share of the fleet per tick,
    at most SCAN_RATE workers a second, however late the tick."""
    from coordinator.edge import read_feed

    core, view, feed, looked = _fleet_watched()
    try:
        await settled()
        looked.clear()
        register(core, "new", "h99", 0)
        conn = core.workers.get("w007")
        core.on_message(conn, wpb.WorkerMessage(heartbeat=wpb.Heartbeat(executor=pb.EXECUTOR_STOPPED)))
        got = {w.worker_id: w for w in (await view.list_workers((), 1000))[0]}
        assert "new" in got and got["w007"].executor_health == pb.EXECUTOR_STOPPED
        assert len(looked) <= 5, looked  # the touched ones (and the clock's share, if it ticked)
        conn.last_heartbeat_wall = 12345.0  # as an unchanged heartbeat (Alive) sets it
        assert {w.worker_id: w for w in (await view.list_workers((), 1000))[0]}["w007"].last_heartbeat == 12345.0

        monkeypatch.setattr(read_feed, "SCAN_RATE", 100)  # 301 workers: a 3 s cycle
        looked.clear()
        feed._ticked -= 10.0  # a tick 10 s late (the core was held up)
        feed.flush(share=feed._share())
        assert 0 < len(looked) <= 4 * read_feed.STAMP_S * 100 + 1  # four ticks' worth, not the fleet
    finally:
        await feed.stop()


@run
async def test_a_cordon_and_an_uncordon_are_read_at_once_without_a_look_at_the_fleet():
    """A worker write, as the edge serves it (the write on the core, then the feed's flush before
    the answer leaves): the cordoned worker's listing is in the next read, after a look at that
    worker alone (its new health record touches it), not at all 300."""
    from coordinator.edge import usecases
    from coordinator.edge.edge_reads import then_flush

    core, view, feed, looked = _fleet_watched()
    write = then_flush(lambda req, ctx: usecases.cordon(core, req[0], req[1]), feed)
    try:
        await settled()
        for on in (True, False):
            looked.clear()
            await write(("w123", on), None)
            await settled()
            assert looked == ["w123"]
            shown = {w.worker_id: w for w in (await view.list_workers((), 1000))[0]}["w123"]
            assert shown.health.cordoned == on and (shown.state == pb.QUARANTINED) == on
    finally:
        await feed.stop()


@run
async def test_a_job_the_view_has_seen_end_is_read_as_stored_until_its_end_and_last_rows_are():
    """The view hears a job end before the paced commit stores its end and its last rows: a
    GetJob in between was answered SUCCEEDED with 1 of its 2 sizes' rows (a make test run under
    load). It is answered as stored (RUNNING, its first row) until the commit, then whole."""
    import time

    from coordinator.edge.read_view import ViewUpdate

    store = MemoryJobStore()
    running = pb.Job(id="j1", state=pb.RUNNING, spec=spec(2))
    store.create(running)
    store.add_result("j1", pb.SizeResult(op="all_reduce", size_bytes=1024, world_size=2))
    view = ReadView(store)
    ended = pb.Job(id="j1", state=pb.SUCCEEDED, reason="all ranks finished", spec=spec(2))
    view.apply(ViewUpdate(stamp=time.monotonic(), jobs=[(ended, True)]))
    got = await view.get_job("j1")
    assert (got.state, len(got.results)) == (pb.RUNNING, 1)
    store.add_result("j1", pb.SizeResult(op="all_reduce", size_bytes=65536, world_size=2))  # the commit
    store.update(ended)
    got = await view.get_job("j1")
    assert (got.state, [r.size_bytes for r in got.results]) == (pb.SUCCEEDED, [1024, 65536])
