"""The control plane at fleet scale, through the real gRPC server and REST API of a coordinator
in this process, with simulated daemons (bench/simfleet.py: real WorkerService streams, no
executors, so GPU workers can be stood in for on a machine without GPUs)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
import pytest

from coordinator.store.sqlite import SqliteJobStore
from ringleader_app.process import CoordinatorConfig, RunningCoordinator
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import jobs_pb2_grpc
from ringleader.v1 import workers_pb2 as wpb

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.simfleet import CPU, GPU, SimSpec, Stats, run_fleet  # noqa: E402

pytestmark = pytest.mark.integration


def scenario(test):
    """Run an async test on a fresh event loop (the coordinator and the fleet share it)."""
    @functools.wraps(test)
    def run(*args, **kwargs):
        return asyncio.run(test(*args, **kwargs))

    return run


@contextlib.asynccontextmanager
async def coordinator(tmp_path: Path, **knobs):
    # Load shedding off unless a test asks for it (test_load_shedding.py): these tests stall the
    # loop on purpose (100,000-entry imports, thousands of simulated daemons) and check other things.
    knobs.setdefault("shed_lag", 0.0)
    config = CoordinatorConfig(grpc_address="127.0.0.1:0", http_address="127.0.0.1:0",
                               db=str(tmp_path / "jobs.db"), **knobs)
    async with RunningCoordinator(config) as rc:
        async with grpc.aio.insecure_channel(rc.grpc_target) as channel:
            rc.stub = jobs_pb2_grpc.JobServiceStub(channel)
            yield rc


@contextlib.asynccontextmanager
async def fleet(rc, specs: list[SimSpec], job_s=0.05):
    """Simulated daemons for `specs`; each job runs `job_s` seconds (or `job_s(assignment)`)."""
    stop, stats = asyncio.Event(), Stats()
    length = job_s if callable(job_s) else (lambda a: job_s)
    task = asyncio.create_task(run_fleet(rc.grpc_target, specs, stop, stats, length))
    try:
        await until(lambda: len(rc.core.workers.connected()) >= len(specs), f"{len(specs)} workers registered")
        yield stats
    finally:
        stop.set()
        await task


async def until(check, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"not reached in {timeout} s: {what}"
        await asyncio.sleep(0.02)
    return result


def collective(n: int, device_type: str = "", **kw) -> pb.JobSpec:
    return pb.JobSpec(world_size=n, placement=pb.Placement(device_type=device_type), **kw,
                      collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))


async def finished(rc, job_id: str) -> pb.Job:
    async def done():
        job = await rc.stub.GetJob(pb.GetJobRequest(job_id=job_id))
        return job if job.state in (pb.SUCCEEDED, pb.FAILED, pb.CANCELLED) else None

    deadline = time.monotonic() + 30
    while (job := await done()) is None:
        assert time.monotonic() < deadline, f"job {job_id} did not finish"
        await asyncio.sleep(0.02)
    return job


@scenario
async def test_mixed_fleet_gang_that_cannot_run_reserves_nobody(tmp_path):
    async with coordinator(tmp_path) as rc, fleet(rc, [SimSpec("cpu0", "hc", 0, CPU), SimSpec("gpu0", "hg", 0, GPU)]):
        gang = await rc.stub.SubmitJob(pb.SubmitJobRequest(spec=collective(2)))
        assert gang.state == pb.QUEUED
        assert gang.reason == "needs 2 workers of one backend, 1 nccl, 1 gloo connected"
        on_cpu = await rc.stub.SubmitJob(pb.SubmitJobRequest(spec=collective(1, "cpu")))
        on_gpu = await rc.stub.SubmitJob(pb.SubmitJobRequest(spec=collective(1, "cuda")))
        cpu_done, gpu_done = await finished(rc, on_cpu.id), await finished(rc, on_gpu.id)
        assert (cpu_done.state, cpu_done.backend, cpu_done.workers[0].worker_id) == (pb.SUCCEEDED, "gloo", "cpu0")
        assert (gpu_done.state, gpu_done.backend, gpu_done.workers[0].worker_id) == (pb.SUCCEEDED, "nccl", "gpu0")
        assert (await rc.stub.GetJob(pb.GetJobRequest(job_id=gang.id))).state == pb.QUEUED


@scenario
async def test_disconnected_workers_leave_registry_and_metrics_after_ttl(tmp_path):
    specs = [SimSpec(f"w{i}", "h1", i) for i in range(3)]
    async with coordinator(tmp_path, worker_ttl=1.0, tick=0.1) as rc:
        async with fleet(rc, specs):
            pass  # registered, then gone
        await until(lambda: not rc.core.workers.connected(), "workers disconnected")
        listed = await rc.stub.ListWorkers(pb.ListWorkersRequest())
        assert [w.state for w in listed.workers] == [pb.DISCONNECTED] * 3
        assert 'ringleader_workers{backend="gloo",state="disconnected"} 3.0' in rc.metrics.render()[0].decode()
        await until(lambda: not rc.core.workers.all(), "workers forgotten", timeout=10)
        assert not (await rc.stub.ListWorkers(pb.ListWorkersRequest())).workers
        assert 'backend="gloo"' not in rc.metrics.render()[0].decode()
        async with fleet(rc, specs[:1]):  # a worker that comes back registers again
            listed = await rc.stub.ListWorkers(pb.ListWorkersRequest())
            assert [(w.worker_id, w.state) for w in listed.workers] == [("w0", pb.IDLE)]


@scenario
async def test_list_workers_pages_over_grpc_and_rest(tmp_path):
    specs = [SimSpec(f"w{i:03}", f"h{i % 3}", i // 3) for i in range(120)]
    order = [s.worker_id for s in sorted(specs, key=lambda s: (s.host, s.index, s.worker_id))]
    async with coordinator(tmp_path) as rc, fleet(rc, specs):
        seen, token, sizes = [], "", []
        while True:
            page = await rc.stub.ListWorkers(pb.ListWorkersRequest(limit=50, page_token=token))
            sizes.append(len(page.workers))
            seen += [w.worker_id for w in page.workers]
            if not (token := page.next_page_token):
                break
        assert sizes == [50, 50, 20] and seen == order
        idle = await rc.stub.ListWorkers(pb.ListWorkersRequest(states=[pb.IDLE], limit=1000))
        assert len(idle.workers) == 120 and not idle.next_page_token
        assert not (await rc.stub.ListWorkers(pb.ListWorkersRequest(states=[pb.DISCONNECTED]))).workers
        assert len((await rc.stub.ListWorkers(pb.ListWorkersRequest())).workers) == 50  # the default page
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rc.stub.ListWorkers(pb.ListWorkersRequest(page_token="not-a-token"))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("page_token:")

        async with httpx.AsyncClient(base_url=rc.http_url) as http:
            seen, token = [], None
            while True:
                params = {"limit": 50, **({"page_token": token} if token else {})}
                body = (await http.get("/api/v1/workers", params=params)).json()
                seen += [w["worker_id"] for w in body["workers"]]
                if not (token := body["next_page_token"]):
                    break
            assert seen == order
            busy = (await http.get("/api/v1/workers", params={"state": "BUSY"})).json()
            assert busy["workers"] == [] and busy["next_page_token"] is None
            bad = await http.get("/api/v1/workers", params={"page_token": "nope"})
            assert bad.status_code == 404 and bad.json()["detail"].startswith("page_token:")  # names no page


@scenario
async def test_list_jobs_pages_past_a_thousand_over_grpc(tmp_path):
    store = SqliteJobStore(tmp_path / "jobs.db")
    for i in range(2540):
        store.create(pb.Job(id=f"j{i:05}", state=pb.SUCCEEDED, created_at=float(i), spec=collective(1)))
    store.close()
    async with coordinator(tmp_path) as rc:
        pages, before = [], ""
        while True:
            page = await rc.stub.ListJobs(pb.ListJobsRequest(limit=1000, before_id=before))
            pages.append([j.id for j in page.jobs])
            if not (before := page.next_before_id):
                break
        assert [len(p) for p in pages] == [1000, 1000, 540]
        assert sum(pages, []) == [f"j{i:05}" for i in range(2539, -1, -1)]


@scenario
async def test_request_id_makes_submit_idempotent_across_restarts(tmp_path):
    spec = collective(2)
    async with coordinator(tmp_path) as rc:  # no workers: the job waits
        first = await rc.stub.SubmitJob(pb.SubmitJobRequest(spec=spec, request_id="retry-1"))
        again = await rc.stub.SubmitJob(pb.SubmitJobRequest(spec=spec, request_id="retry-1"))
        assert again.id == first.id and again.request_id == "retry-1"
        listed = await rc.stub.ListJobs(pb.ListJobsRequest())
        assert [j.id for j in listed.jobs] == [first.id]
        for request, field in [(pb.SubmitJobRequest(spec=collective(3), request_id="retry-1"), "request_id"),
                               (pb.SubmitJobRequest(spec=spec, request_id="r" * 129), "request_id")]:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await rc.stub.SubmitJob(request)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert err.value.details().startswith(f"{field}:")
    async with coordinator(tmp_path) as rc:  # the same store, after a restart
        after = await rc.stub.SubmitJob(pb.SubmitJobRequest(spec=spec, request_id="retry-1"))
        assert after.id == first.id
        async with httpx.AsyncClient(base_url=rc.http_url) as http:
            body = {"world_size": 2, "queue": True, "collective": {"op": "all_reduce", "sizes": [1024], "iters": 1}}
            one = await http.post("/api/v1/jobs", params={"request_id": "rest-1"}, json=body)
            two = await http.post("/api/v1/jobs", params={"request_id": "rest-1"}, json=body)
            assert one.status_code == two.status_code == 201 and one.json()["id"] == two.json()["id"]
            other = await http.post("/api/v1/jobs", params={"request_id": "rest-1"}, json={**body, "world_size": 3})
            assert other.status_code == 409 and "request_id" in other.json()["detail"], other.text


@scenario
async def test_submit_answers_only_once_the_job_is_stored(tmp_path):
    async with coordinator(tmp_path) as rc:
        # Each submit makes a new group of writes: another connection must see the row at once.
        for _ in range(5):
            job = await rc.stub.SubmitJob(pb.SubmitJobRequest(spec=collective(2)))
            with contextlib.closing(sqlite3.connect(tmp_path / "jobs.db")) as outside:
                assert outside.execute("SELECT state FROM jobs WHERE id = ?", (job.id,)).fetchone() == (pb.QUEUED,)


@scenario
async def test_field_and_message_bounds_over_grpc(tmp_path):
    async with coordinator(tmp_path) as rc:
        for spec, field in [(collective(10**9), "world_size"), (collective(2, name="x" * (3 << 20)), "name"),
                            (collective(2, priority=10**6), "priority")]:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await rc.stub.SubmitJob(pb.SubmitJobRequest(spec=spec))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert err.value.details().startswith(f"{field}:")
        with pytest.raises(grpc.aio.AioRpcError) as err:  # under the 32 MiB request limit: its field refuses it
            await rc.stub.SubmitJob(pb.SubmitJobRequest(spec=collective(2, name="x" * (5 << 20))))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith("name:")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rc.stub.SubmitJob(pb.SubmitJobRequest(spec=collective(2, name="x" * (33 << 20))))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # over the 32 MiB request limit
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rc.stub.GetJob(pb.GetJobRequest(job_id="j" * 300))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith("job_id:")
        assert not (await rc.stub.ListJobs(pb.ListJobsRequest())).jobs  # nothing was stored


@scenario
async def test_worker_free_text_is_clipped_before_it_reaches_a_reason(tmp_path):
    async with coordinator(tmp_path) as rc:
        core = rc.core
        conn = core.register(SimSpec("w0", "h1", 0).register())
        job = core.submit(collective(1))
        await until(lambda: core.get(job.id).state == pb.RUNNING, "placed at the end of the turn")
        core.on_message(conn, wpb.WorkerMessage(heartbeat=wpb.Heartbeat(
            job_id=job.id, executor=pb.EXECUTOR_STOPPED, executor_detail="d" * 5000)))
        assert len(conn.executor_detail) == 256
        core.on_message(conn, wpb.WorkerMessage(done=wpb.JobDone(
            job_id=job.id, rank=0, ok=False, error="e" * (1 << 20), failure=wpb.RANK_ERROR)))
        failed = core.get(job.id)
        assert failed.state == pb.FAILED and failed.reason.startswith("rank 0 (worker w0) failed: eee")
        assert len(failed.reason) < 1100


def test_worker_ttl_flag_is_checked():
    out = subprocess.run([sys.executable, "-m", "ringleader", "coordinator", "--worker-ttl", "0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        "ringleader coordinator: error: argument --worker-ttl: expected a positive number of seconds, got '0'")
