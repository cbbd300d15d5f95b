"""WatchJob on the edge loop (coordinator/edge/watch.py): the core pushes each event to the stream as
it publishes it, so the client has a job's end before the core's turn that ended it is over; a
watcher that leaves is forgotten on the core; an unknown job is NOT_FOUND."""

from __future__ import annotations

import asyncio
import threading
import time

import grpc
import pytest

from ringleader_app.process import CoordinatorConfig, RunningCoordinator
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import jobs_pb2_grpc

pytestmark = pytest.mark.integration

HELD_S = 0.5  # the rest of the turn that published the end, held on the core
SPEC = pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="all_reduce", sizes=[8]))  # no worker: it queues


def _watch(target: str, job_id: str, seen: list, cancel_after_first: bool = False) -> None:
    with grpc.insecure_channel(target) as channel:
        call = jobs_pb2_grpc.JobServiceStub(channel).WatchJob(pb.WatchJobRequest(job_id=job_id))
        try:
            for event in call:
                seen.append((time.perf_counter(), event))
                if cancel_after_first:
                    call.cancel()
        except grpc.RpcError as exc:
            seen.append((time.perf_counter(), exc.code()))


async def _scenario(tmp_path) -> dict:
    config = CoordinatorConfig(grpc_address="127.0.0.1:0", http_address="", db=str(tmp_path / "jobs.db"),
                               shed_lag=0.0)
    out: dict = {}
    async with RunningCoordinator(config) as rc:
        c = rc.core
        job = c.submit(SPEC)
        await c.durable()
        seen: list = []
        watcher = threading.Thread(target=_watch, args=(rc.grpc_target, job.id, seen))
        watcher.start()
        while not seen:  # the stored QUEUED state came: the watch is registered
            await asyncio.sleep(0.01)
        ended = asyncio.get_running_loop().create_future()

        def cancel_and_hold() -> None:  # one callback of the core: the end published, then more work
            c.cancel(job.id, "test")  # applied here: the job ends, its watchers hear of it
            end = time.perf_counter() + HELD_S
            while time.perf_counter() < end:
                pass
            ended.set_result(time.perf_counter())
        asyncio.get_running_loop().call_soon(cancel_and_hold)
        out["turn_end"] = await ended
        await asyncio.get_running_loop().run_in_executor(None, watcher.join, 10)
        out["seen"] = seen
        left: list = []  # a watcher that leaves after the first event
        other = c.submit(SPEC)
        await c.durable()
        await asyncio.get_running_loop().run_in_executor(None, _watch, rc.grpc_target, other.id, left, True)
        for _ in range(200):
            if other.id not in c.events._watchers:
                break
            await asyncio.sleep(0.01)
        out["left_first"] = left[0][1] if left else None  # its stored QUEUED: it was followed, then left
        out["left_watchers"] = other.id in c.events._watchers
        missing: list = []
        await asyncio.get_running_loop().run_in_executor(None, _watch, rc.grpc_target, "nosuchjob", missing)
        out["missing"] = missing
    return out


def test_a_watch_gets_the_end_before_the_core_turn_that_published_it_is_over(tmp_path):
    out = asyncio.run(_scenario(tmp_path))
    states = [e.state.state for _, e in out["seen"] if isinstance(e, pb.JobEvent) and e.HasField("state")]
    assert states == [pb.QUEUED, pb.CANCELLED]
    cancelled_at = out["seen"][-1][0]
    # Hopped to the core, the stream's generator ran only after that callback: HELD_S later.
    assert cancelled_at < out["turn_end"] - HELD_S / 2, "the end reached the client only after the core's turn"
    assert isinstance(out["left_first"], pb.JobEvent) and out["left_first"].state.state == pb.QUEUED
    assert out["left_watchers"] is False  # the watch that left is no longer followed on the core
    assert [x for _, x in out["missing"]] == [grpc.StatusCode.NOT_FOUND]
