"""SubmitAndWatchJob (coordinator/edge/watch.py): SubmitJob and WatchJob in one call. Its first
answer is the job as SubmitJob acknowledges it (stored), then the job's events to its terminal
state; a bad spec is refused naming the field; a repeated request id is the same job; a client
that leaves is forgotten on the core. No worker here: the jobs queue."""

from __future__ import annotations

import asyncio
import sqlite3
import threading

import grpc
import pytest

from ringleader_app.client import Client
from ringleader_app.process import CoordinatorConfig, RunningCoordinator
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration

SPEC = pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="all_reduce", sizes=[8]))


def _stored(db: str, job_id: str) -> bool:
    """Whether the job's row is committed: read by another connection, as after a crash."""
    with sqlite3.connect(db) as other:
        return any(job_id in str(row) for row in other.execute("SELECT * FROM jobs"))


async def _scenario(tmp_path) -> dict:
    db = str(tmp_path / "jobs.db")
    config = CoordinatorConfig(grpc_address="127.0.0.1:0", http_address="", db=db, shed_lag=0.0)
    out: dict = {}
    async with RunningCoordinator(config) as rc:
        loop = asyncio.get_running_loop()
        client = Client(rc.grpc_target)
        got: list = []
        first = threading.Event()

        def watch() -> None:
            for item in client.submit_and_watch(SPEC, request_id="one-call-1"):
                got.append(item)
                if len(got) == 1:
                    out["stored_when_acknowledged"] = _stored(db, item.id)
                    first.set()
        watcher = threading.Thread(target=watch)
        watcher.start()
        await loop.run_in_executor(None, first.wait, 10)
        job = got[0]
        while not any(isinstance(x, pb.JobEvent) for x in got):  # its stored QUEUED came
            await asyncio.sleep(0.01)
        out["watched"] = job.id in rc.core.events._watchers
        await loop.run_in_executor(None, client.cancel, job.id, "test")
        await loop.run_in_executor(None, watcher.join, 10)
        out["got"] = got
        for _ in range(200):
            if job.id not in rc.core.events._watchers:
                break
            await asyncio.sleep(0.01)
        out["forgotten"] = job.id not in rc.core.events._watchers
        again = await loop.run_in_executor(None, lambda: next(client.submit_and_watch(SPEC, request_id="one-call-1")))
        out["again"] = (job.id, again.id)

        def refused():
            bad = pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="nosuchop", sizes=[8]))
            try:
                next(client.submit_and_watch(bad))
            except grpc.RpcError as exc:
                return exc.code(), exc.details()
        out["refused"] = await loop.run_in_executor(None, refused)
        client.close()
    return out


def test_one_call_acknowledges_a_stored_job_then_streams_its_events_to_the_end(tmp_path):
    out = asyncio.run(_scenario(tmp_path))
    job, *events = out["got"]
    assert isinstance(job, pb.Job) and job.state == pb.QUEUED
    assert out["stored_when_acknowledged"], "the acknowledgement came before the job was stored"
    assert out["watched"]
    states = [e.state.state for e in events if e.WhichOneof("event") == "state"]
    assert states[0] == pb.QUEUED and states[-1] == pb.CANCELLED, events
    assert events[-1].state.state == pb.CANCELLED  # the stream ends with the terminal state
    assert [e.seq for e in events if e.seq] == sorted(e.seq for e in events if e.seq)
    assert out["forgotten"], "the ended call's watch stayed registered on the core"
    assert out["again"][0] == out["again"][1], "a repeated request id is the job it created"
    code, details = out["refused"]
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "op" in details, details
