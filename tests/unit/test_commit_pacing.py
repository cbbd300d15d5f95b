"""When the facade commits the store's open group of writes (coordinator/shell/facade.py): worker
traffic alone at most every COMMIT_EVERY_S, a caller of `durable()` at the end of its turn, a
user's acknowledgement (`durable(at_once=True)`) at once."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time

from coordinator.shell import facade
from coordinator.shell.facade import Coordinator
from coordinator.store.sqlite import SqliteJobStore
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb


class CountingStore(SqliteJobStore):
    def __init__(self, path) -> None:
        super().__init__(path)
        self.commits: list[float] = []

    def commit(self) -> None:
        if self._conn.in_transaction:
            self.commits.append(time.monotonic())
        super().commit()


def spec() -> pb.JobSpec:
    return pb.JobSpec(world_size=1, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))


async def started(tmp_path) -> tuple[CountingStore, Coordinator]:
    """A started facade on a counting store, its start-up's writes committed and not counted."""
    store = CountingStore(tmp_path / "jobs.sqlite")
    core = Coordinator(store)
    await core.start()
    await core.durable()
    store.commits.clear()
    return store, core


async def turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_worker_traffic_commits_once_a_pace_and_a_waiting_caller_at_its_turns_end(tmp_path, monkeypatch):
    monkeypatch.setattr(facade, "COMMIT_EVERY_S", 0.2)

    async def main() -> None:
        store, core = await started(tmp_path)
        conn = core.register(wpb.Register(worker_id="w1", host="h1", address="10.0.0.1", backend="gloo",
                                          version="test", device=pb.Device(type="cpu", index=0, name="cpu")))
        await turns(5)
        job = core.submit(spec())  # a write, and nobody waits for it yet
        await turns(20)  # many turns: none commits on its own
        assert store.commits == []
        began = time.monotonic()
        await core.durable()  # the caller waits: committed at the end of this turn, not at the pace
        assert len(store.commits) == 1 and store.commits[0] - began < 0.1
        # Worker traffic alone (the rank's report ends the job: writes), nobody waiting.
        core.on_message(conn, wpb.WorkerMessage(done=wpb.JobDone(job_id=job.id, rank=0, ok=True)))
        wrote = time.monotonic()
        await turns(20)
        assert len(store.commits) == 1
        while len(store.commits) < 2 and time.monotonic() - wrote < 2:
            await asyncio.sleep(0.01)
        assert len(store.commits) == 2 and store.commits[1] - wrote >= 0.19  # at the pace, once
        assert store.get(job.id).state == pb.SUCCEEDED
        await core.stop()
        core.close()
        store.close()

    asyncio.run(main())


def test_a_paced_commit_due_after_close_does_nothing(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(facade, "COMMIT_EVERY_S", 0.05)

    async def main() -> None:
        store, core = await started(tmp_path)
        core.submit(spec())  # a group opens; its paced commit is due in 50 ms
        core.close()  # commits it; the store closes right after, as the process does
        store.close()
        await asyncio.sleep(0.15)  # past the pace: the timer fires into a closed facade

    asyncio.run(main())
    assert not [r for r in caplog.records if "commit failed" in r.getMessage()]


def test_a_users_acknowledgement_commits_in_its_own_step_with_the_writes_before_it(tmp_path):
    """durable(at_once=True), a user's acknowledgement: committed before it returns, in the same
    step of the caller's task (no turn of the loop passes: a draining core's turns are what its
    body used to wait for), and a caller already waiting for the end of the turn is settled by it."""

    async def main() -> None:
        store, core = await started(tmp_path)
        core.submit(spec())  # a write
        earlier = asyncio.ensure_future(core.durable())  # waits for the end of the turn
        await turns(1)  # it has started waiting (a turn passed: its commit is due in this one)
        assert not earlier.done() and store.commits == []
        core.submit(spec())
        marker: list[str] = []
        asyncio.get_running_loop().call_soon(marker.append, "a turn passed")
        await core.durable(at_once=True)
        assert marker == [] and len(store.commits) == 1  # committed here, no turn between
        await turns(1)
        assert earlier.done() and earlier.exception() is None and len(store.commits) == 1
        with contextlib.closing(sqlite3.connect(tmp_path / "jobs.sqlite")) as outside:  # durable: seen from outside
            assert outside.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 2
        await core.stop()
        core.close()
        store.close()

    asyncio.run(main())
