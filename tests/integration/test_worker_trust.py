"""What a worker may say: credentials to join, and reports only about its own job, as its own rank.

The real coordinator (in this process: gRPC server on loopback, SQLite in a temp folder, its
metrics) against FakeWorker, a protocol-level fake daemon: a raw WorkerService stream that sends
what a forged or misbehaving worker would, which a real daemon never does.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from ringleader_app.process import CoordinatorConfig, RunningCoordinator
from ringleader.security import ServerSecurity, bearer
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from ringleader.v1 import workers_pb2_grpc

pytestmark = pytest.mark.integration

USERS_TOKEN, WORKERS_TOKEN = "users-token-0123456789", "workers-token-0123456789"
SIZES = [1024, 2048]


class FakeWorker:
    """Fake (protocol level): registers like a daemon, then sends whatever the test says."""

    def __init__(self, target: str, worker_id: str, token: str) -> None:
        self.target, self.worker_id, self.token = target, worker_id, token
        self.channel: grpc.aio.Channel | None = None
        self.call = None

    async def connect(self) -> None:
        self.channel = grpc.aio.insecure_channel(self.target)
        self.call = workers_pb2_grpc.WorkerServiceStub(self.channel).Connect(metadata=bearer(self.token))
        await self.call.write(wpb.WorkerMessage(register=wpb.Register(
            worker_id=self.worker_id, host="fakehost", address="127.0.0.1", backend="gloo", version="fake",
            device=pb.Device(type="cpu", index=0, name="fake"))))
        first = await self.call.read()
        assert first.WhichOneof("msg") == "registered", first

    async def next(self, kind: str) -> wpb.CoordinatorMessage:
        while True:
            msg = await asyncio.wait_for(self.call.read(), 10)
            if msg.WhichOneof("msg") == kind:
                return getattr(msg, kind)

    async def send(self, **msg) -> None:
        await self.call.write(wpb.WorkerMessage(**msg))

    async def close(self) -> None:
        if self.channel:
            await self.channel.close()


def row(**kw) -> pb.SizeResult:
    fields = dict(op="all_reduce", dtype="float32", reduce_op="sum", size_bytes=SIZES[0], world_size=2,
                  time_us=10.0, busbw_gbps=1.0, algbw_gbps=1.0)
    return pb.SizeResult(**{**fields, **kw})


async def until(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)
    return value


def test_workers_need_the_workers_token(tmp_path):
    async def scenario():
        async with running(tmp_path) as coord:
            for token, code in (("", grpc.StatusCode.UNAUTHENTICATED),
                                ("guessed-guessed-guessed", grpc.StatusCode.UNAUTHENTICATED),
                                (USERS_TOKEN, grpc.StatusCode.PERMISSION_DENIED)):
                w = FakeWorker(coord.grpc_target, "rogue", token)
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await w.connect()
                await w.close()
                assert err.value.code() == code, token
            assert coord.core.list_workers().workers == []  # none of them reached the registry

    asyncio.run(scenario())


def test_reports_from_non_members_and_foreign_rows_are_refused_and_counted(tmp_path):
    async def scenario():
        async with running(tmp_path) as coord:
            a, b, outsider = (FakeWorker(coord.grpc_target, w, WORKERS_TOKEN) for w in ("fa", "fb", "fc"))
            for w in (a, b, outsider):
                await w.connect()
            job = coord.core.submit(pb.JobSpec(world_size=2, placement=pb.Placement(worker_ids=["fa", "fb"]),
                                               collective=pb.CollectiveSpec(op="all_reduce", sizes=SIZES)))
            assignment = await a.next("assignment")
            assert (assignment.job_id, assignment.rank) == (job.id, 0)
            rj = coord.core.book.running[job.id]
            stall_clock = rj.last_progress

            # A connected worker that is no member of the job speaks for it.
            await outsider.send(result=wpb.ResultReport(job_id=job.id, result=row()))
            await outsider.send(progress=wpb.ProgressReport(job_id=job.id, rank=0, progress=pb.Progress(done=1, total=2)))
            await outsider.send(store_ready=wpb.StoreReady(job_id=job.id, group_key=rj.group_key, store_port=1))
            # Rank 0 reports rows that are not its job's: a script as op, a label-exploding world size.
            await a.send(result=wpb.ResultReport(job_id=job.id, result=row(op="<script>alert(1)</script>")))
            await a.send(result=wpb.ResultReport(job_id=job.id, result=row(world_size=999_999)))
            await a.send(result=wpb.ResultReport(job_id=job.id, result=row()))  # a good one
            rejected = coord.core.dispatch.rejected
            await until(lambda: rejected["result"] == 3 and coord.store.get(job.id).results)
            assert dict(rejected) == {"result": 3, "progress": 1, "store_ready": 1}
            assert rj.last_progress == stall_clock  # the outsider did not reset the stall timer
            assert rj.store_port == 0  # nor named the store
            assert [(r.op, r.size_bytes) for r in coord.store.get(job.id).results] == [("all_reduce", SIZES[0])]

            metrics = coord.metrics.render()[0].decode()
            assert 'ringleader_worker_reports_rejected_total{kind="result"} 3.0' in metrics
            assert 'ringleader_worker_reports_rejected_total{kind="progress"} 1.0' in metrics
            assert 'ringleader_worker_reports_rejected_total{kind="store_ready"} 1.0' in metrics
            assert "<script>" not in metrics and 'world_size="999999"' not in metrics

            # A final set holding a foreign row fails the job, naming the rank and the worker.
            await a.send(done=wpb.JobDone(job_id=job.id, rank=0, ok=True, results=[row(), row(dtype="int8")]))
            failed = await until(lambda: (j := coord.core.get(job.id)).state == pb.FAILED and j)
            assert failed.reason == ("rank 0 (worker fa) reported a result that is not this job's: "
                                     "dtype 'int8' is not the job's 'float32'")
            assert rejected["done"] == 1
            assert all(r.dtype == "float32" for r in coord.store.get(job.id).results)
            for w in (a, b, outsider):
                await w.close()

    asyncio.run(scenario())


def running(tmp_path) -> RunningCoordinator:
    # Fakes send no heartbeats: a long timeout keeps them registered for the whole scenario.
    return RunningCoordinator(CoordinatorConfig(
        grpc_address="127.0.0.1:0", http_address="", db=str(tmp_path / "jobs.db"),
        heartbeat_timeout=120, security=ServerSecurity(USERS_TOKEN, WORKERS_TOKEN)))
