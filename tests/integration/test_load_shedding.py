"""A saturated coordinator: calls that add work are refused at once with
RESOURCE_EXHAUSTED / 429 and a retry-after, nothing done, while reads are still answered; the
CLI's client waits as asked and tries again. A real coordinator (gRPC and REST on loopback, in
this process); the saturation is real too: the test blocks the coordinator's event loop, as a
burst of work would."""

from __future__ import annotations

import asyncio
import time

import grpc
import httpx
import pytest

from test_scale import coordinator, scenario, until  # noqa: I001 - tests/integration is on the path

from ringleader_app.client import Client
from ringleader.grpc_options import RETRY_AFTER
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration

STALL_S = 0.6  # the loop blocked this long: twice the threshold below


async def keeping_up(rc) -> None:
    """Until the loop's lag is under the threshold (a coordinator's start-up stalls it too)."""
    await until(lambda: rc.core.lag.lag_s() < rc.core.lag.shed_lag_s, "the loop keeps up", timeout=10)
QUEUED = pb.JobSpec(world_size=1, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))


@scenario
async def test_a_saturated_coordinator_refuses_added_work_at_once_and_answers_reads(tmp_path):
    async with coordinator(tmp_path, shed_lag=0.3) as rc:
        await keeping_up(rc)
        first = await rc.stub.SubmitJob(pb.SubmitJobRequest(spec=QUEUED))  # a loop on time: accepted
        time.sleep(STALL_S)  # the loop stalls (what thousands of worker messages at once do)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await rc.stub.SubmitJob(pb.SubmitJobRequest(spec=QUEUED))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "saturated" in err.value.details() and "retry after" in err.value.details()
        retry = dict(err.value.trailing_metadata())[RETRY_AFTER]
        assert int(retry) >= 1
        # Reads are answered all the while; the refused call did nothing.
        got = await rc.stub.GetJob(pb.GetJobRequest(job_id=first.id))
        assert got.id == first.id
        assert [j.id for j in (await rc.stub.ListJobs(pb.ListJobsRequest())).jobs] == [first.id]

        time.sleep(STALL_S)
        async with httpx.AsyncClient(base_url=rc.http_url) as http:
            r = await http.post("/api/v1/jobs", json={"world_size": 1, "queue": True,
                                                      "collective": {"op": "all_reduce", "sizes": [1024]}})
            assert r.status_code == 429 and "saturated" in r.json()["detail"], r.text
            assert int(r.headers["Retry-After"]) >= 1
            assert (await http.get(f"/api/v1/jobs/{first.id}")).status_code == 200
        assert rc.core.lag.shed == 2

        # Once the loop keeps up again (the lag window has passed), work is accepted.
        await keeping_up(rc)
        assert (await rc.stub.SubmitJob(pb.SubmitJobRequest(spec=QUEUED))).state == pb.QUEUED


async def saturate(seconds: float) -> None:
    """Keep the loop saturated for `seconds`: blocked 0.4 s at a time, a turn in between."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.4)
        await asyncio.sleep(0)


@scenario
async def test_the_client_waits_as_asked_and_tries_again(tmp_path):
    async with coordinator(tmp_path, shed_lag=0.3) as rc:
        await keeping_up(rc)
        client = Client(rc.grpc_target, busy_tries=5)
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, client.list)  # connected before the loop saturates
            # Sent while the loop is saturated: refused (retry after 1-2 s), tried again by the
            # client, and accepted once the loop keeps up.
            busy = asyncio.create_task(saturate(1.5))
            job = await loop.run_in_executor(None, client.submit, QUEUED)
            await busy
        finally:
            client.close()
        assert job.state == pb.QUEUED and 1 <= rc.core.lag.shed <= 4
        listed = await rc.stub.ListJobs(pb.ListJobsRequest())
        assert [j.id for j in listed.jobs] == [job.id]  # one job: the refused tries did nothing


@scenario
async def test_shedding_off_never_refuses(tmp_path):
    async with coordinator(tmp_path, shed_lag=0.0) as rc:
        time.sleep(STALL_S)
        assert (await rc.stub.SubmitJob(pb.SubmitJobRequest(spec=QUEUED))).state == pb.QUEUED
        assert rc.core.lag.shed == 0
