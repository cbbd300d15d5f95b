"""The write use cases both doors call (coordinator/edge/usecases.py), on a real in-process
coordinator with the in-memory store: a submit is stored and re-read, a retry with its request id
answers the first job, a door's refusal stops it before the core, a saturated coordinator sheds it
at once; a cancel is stored."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.shell.facade import Coordinator, Timings
from coordinator.edge import usecases
from coordinator.store.memory import MemoryJobStore
from ringleader.errors import InvalidSpec, NotFound, Overloaded
from ringleader.v1 import jobs_pb2 as pb


def spec() -> pb.JobSpec:
    return pb.JobSpec(world_size=2,
                      collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))


def test_submit_stores_rereads_and_is_idempotent_and_cancel_is_stored():
    async def main():
        store = MemoryJobStore()
        core = Coordinator(store, Timings(heartbeat_timeout_s=5))
        job = await usecases.submit(core, spec(), "key-1")
        assert job.state == pb.QUEUED and store.job_for_request("key-1") == job.id
        again = await usecases.submit(core, spec(), "key-1")
        assert again.id == job.id
        cancelled = await usecases.cancel(core, job.id, "not wanted")
        assert cancelled.state == pb.CANCELLED
        assert store.get(job.id).state == pb.CANCELLED
        with pytest.raises(NotFound):
            await usecases.cancel(core, "no-such-job", "")
    asyncio.run(main())


def test_a_doors_precheck_refuses_before_the_core_and_a_saturated_core_sheds():
    async def main():
        core = Coordinator(MemoryJobStore(), Timings(heartbeat_timeout_s=5))

        def refuse():
            raise InvalidSpec("world_size", "too big for the fleet")
        with pytest.raises(InvalidSpec):
            await usecases.submit(core, spec(), "key-2", precheck=refuse)
        assert not core.list_jobs(states=[], op="", limit=10, before_id="").jobs
        core.lag.shed_lag_s = 0.001
        core.lag.lag_s = lambda now=None: 5.0
        with pytest.raises(Overloaded):
            await usecases.submit(core, spec(), "key-3")
    asyncio.run(main())
