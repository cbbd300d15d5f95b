"""A fleet-wide check on a busy fleet: a real coordinator (gRPC on loopback, in this process) with
simulated daemons. A check of more workers than one gang takes (coordinator/health/sweeper.py's
GANG_MAX) runs as gangs of whole hosts, each starting when its own workers are idle: a user job
on one worker holds back only the gang that names that worker. (One job naming every worker
waited for all of them at once, which a fleet with any user traffic never is.)"""

from __future__ import annotations

import math

import pytest

from test_scale import coordinator, finished, fleet, scenario, until  # noqa: I001 - tests/integration is on the path

from bench.simfleet import SimSpec
from coordinator.health import sweeper
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration


def hold_forever(a) -> float:
    return math.inf if a.spec.name == "hold" else 0.05


@scenario
async def test_a_check_of_a_busy_fleet_runs_gang_by_gang(tmp_path):
    specs = [SimSpec(f"h{h}-{i}", f"h{h}", i) for h in range(5) for i in range(8)]
    assert len(specs) > sweeper.GANG_MAX  # more than one gang
    async with coordinator(tmp_path) as rc, fleet(rc, specs, job_s=hold_forever):
        hold = await rc.stub.SubmitJob(pb.SubmitJobRequest(spec=pb.JobSpec(
            world_size=1, name="hold", placement=pb.Placement(worker_ids=["h4-0"]),
            collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))))
        await until(lambda: rc.core.get(hold.id).state == pb.RUNNING, "the hold runs")

        answer = await rc.stub.RunCheck(pb.RunCheckRequest(kinds=["gpu_check"]))
        gangs = [(j.id, list(j.spec.placement.worker_ids)) for j in answer.jobs]
        assert len(gangs) == 2, [len(w) for _, w in gangs]
        free = [j for j, ids in gangs if "h4-0" not in ids]
        held = [j for j, ids in gangs if "h4-0" in ids]
        assert len(free) == len(held) == 1
        held_ids = next(ids for j, ids in gangs if j == held[0])
        assert {f"h4-{i}" for i in range(8)} <= set(held_ids)  # a host is never split

        # The gang clear of the user job runs now and finds every worker healthy.
        done = await finished(rc, free[0])
        assert done.state == pb.SUCCEEDED, done.message
        assert rc.core.get(held[0]).state == pb.QUEUED  # the other waits for its busy worker ...
        await rc.stub.CancelJob(pb.CancelJobRequest(job_id=hold.id))
        done = await finished(rc, held[0])  # ... and runs once it is free
        assert done.state == pb.SUCCEEDED, done.message
        checked = {w.worker_id: w.health.verdict for w in (await rc.stub.ListWorkers(pb.ListWorkersRequest())).workers}
        assert set(checked) == {s.worker_id for s in specs}
        assert set(checked.values()) == {pb.HEALTHY}
