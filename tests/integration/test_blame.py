"""Blame in seconds, with default settings: a stopped executor mid-op or while its group forms is
named within seconds, and a member that reports as another rank fails its job, named, and is not
freed by the lie.

Real coordinator and worker daemon processes (gloo on CPU); the liar is FakeWorker, a
protocol-level fake daemon (a raw WorkerService stream), since a real daemon never lies.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import urllib.request

import grpc
import pytest

from cluster import executor_pid
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from ringleader.v1 import workers_pb2_grpc

pytestmark = pytest.mark.integration

LONG = dict(op="all_reduce", sizes=[1 << 20], iters=100000, warmup=0)  # runs until stopped
SHORT = dict(op="all_reduce", sizes=[4096], iters=3, warmup=1)


def _stopped(pid: int):
    """SIGSTOP `pid`; the returned function sends SIGCONT (if it still lives)."""
    os.kill(pid, signal.SIGSTOP)

    def resume() -> None:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass  # already replaced
    return resume


def test_a_stopped_executor_mid_op_is_named_within_10_s_with_the_default_deadline(fresh_cluster):
    c = fresh_cluster
    ids = ["w0", "w1"]
    c.start(ids)
    job = c.submit(workers=ids, **LONG)
    assert c.client.get(job.id).spec.op_timeout_s == 120  # the default
    c.wait_job(job.id, states=(pb.RUNNING,))
    time.sleep(1.5)  # inside the timed loop
    resume = _stopped(executor_pid(c.workers["w1"].pid))
    stopped_at = time.monotonic()
    try:
        done = c.wait_job(job.id, timeout=60)
        elapsed = time.monotonic() - stopped_at
    finally:
        resume()
    assert done.state == pb.FAILED
    assert done.reason.startswith("rank 1 (worker w1) is not responding (process stopped)"), done.reason
    assert elapsed < 10, elapsed
    print(f"stopped executor named {elapsed:.1f} s after SIGSTOP (op_timeout_s 120): {done.reason}")
    c.wait_idle(ids, timeout=30)
    again = c.wait_job(c.submit(workers=ids, **SHORT).id)
    assert again.state == pb.SUCCEEDED, again.reason


def test_a_stopped_executor_while_the_group_forms_is_named_within_15_s(fresh_cluster):
    c = fresh_cluster
    ids = ["w0", "w1"]
    c.start(ids)
    resume = _stopped(executor_pid(c.workers["w1"].pid))
    stopped_at = time.monotonic()
    try:
        done = c.wait_job(c.submit(workers=ids, **SHORT).id, timeout=60)
        elapsed = time.monotonic() - stopped_at
    finally:
        resume()
    assert done.state == pb.FAILED
    assert done.reason.startswith("rank 1 (worker w1) is not responding (process stopped)"), done.reason
    assert elapsed < 15, elapsed
    print(f"stopped executor named {elapsed:.1f} s after SIGSTOP, during rendezvous: {done.reason}")
    c.wait_idle(ids, timeout=30)
    for _ in range(4):  # the failed rendezvous poisoned neither rank for later groups
        later = c.wait_job(c.submit(workers=ids, **SHORT).id, timeout=30)
        assert later.state == pb.SUCCEEDED, later.reason


class FakeWorker:
    """Fake (protocol level): registers like a daemon, beats like one, then sends what the test says."""

    def __init__(self, target: str, worker_id: str) -> None:
        self.target, self.worker_id = target, worker_id
        self.channel = grpc.aio.insecure_channel(target)
        self.call = workers_pb2_grpc.WorkerServiceStub(self.channel).Connect()
        self.job_id = ""
        self._beats: asyncio.Task | None = None

    async def connect(self) -> None:
        # Its host sorts after the real workers', so it is given the last rank.
        await self.call.write(wpb.WorkerMessage(register=wpb.Register(
            worker_id=self.worker_id, host="zz-fakehost", address="127.0.0.1", backend="gloo", version="fake",
            device=pb.Device(type="cpu", index=0, name="cpu"))))
        first = await self.call.read()
        assert first.WhichOneof("msg") == "registered", first
        self._beats = asyncio.create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            await self.call.write(wpb.WorkerMessage(heartbeat=wpb.Heartbeat(job_id=self.job_id)))
            await asyncio.sleep(0.5)

    async def next(self, kind: str):
        while True:
            msg = await asyncio.wait_for(self.call.read(), 30)
            if msg.WhichOneof("msg") == kind:
                return getattr(msg, kind)

    async def send(self, **msg) -> None:
        await self.call.write(wpb.WorkerMessage(**msg))

    async def close(self) -> None:
        if self._beats:
            self._beats.cancel()
            await asyncio.gather(self._beats, return_exceptions=True)
        await self.channel.close()


def _rejected(http_url: str, kind: str) -> float:
    text = urllib.request.urlopen(f"{http_url}/metrics", timeout=10).read().decode()
    line = f'ringleader_worker_reports_rejected_total{{kind="{kind}"}} '
    return float(next(x for x in text.splitlines() if x.startswith(line)).split()[-1])


def test_a_member_reporting_as_another_rank_fails_its_job_naming_it_and_stays_busy(fresh_cluster):
    c = fresh_cluster
    c.start(["w0"], http=True)

    async def scenario() -> None:
        liar = FakeWorker(c.address, "liar")
        await liar.connect()
        try:
            job = await asyncio.to_thread(c.submit, 2, ["w0", "liar"], **LONG)
            assignment = await liar.next("assignment")  # after the real rank 0 opened its store
            assert (assignment.job_id, assignment.rank) == (job.id, 1)
            liar.job_id = job.id
            lied_at = time.monotonic()
            await liar.send(done=wpb.JobDone(job_id=job.id, rank=0, ok=True))
            done = await asyncio.to_thread(c.wait_job, job.id, timeout=30)
            elapsed = time.monotonic() - lied_at
            assert done.state == pb.FAILED and done.reason == "rank 1 (worker liar) sent a report as rank 0"
            assert elapsed < 5, elapsed
            abort = await liar.next("abort")
            assert abort.job_id == job.id
            states = {w.worker_id: w.state for w in await asyncio.to_thread(c.client.workers)}
            assert states["liar"] == pb.BUSY  # the lie freed nobody: it is still in the job
            await asyncio.to_thread(c.wait_idle, ["w0"], 30)  # the honest rank 0, aborted, is idle
            assert await asyncio.to_thread(_rejected, c.http_url, "done") == 1
            # A JobDone about a job it is not in is counted too.
            await liar.send(done=wpb.JobDone(job_id="000000000000", rank=0, ok=True))
            deadline = time.monotonic() + 10
            while await asyncio.to_thread(_rejected, c.http_url, "done") < 2:
                assert time.monotonic() < deadline, "the non-member's JobDone was not counted"
                await asyncio.sleep(0.1)
        finally:
            await liar.close()

    asyncio.run(scenario())
