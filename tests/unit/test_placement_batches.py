"""Worker messages in batches: the placement pass they call for runs once, when the batch ends
(Control.handle(place=False), then Control.place_due), and a job naming a whole fleet costs a
pass a walk of its list, not one per host."""

from __future__ import annotations

from test_control import Fleet, sends

from coordinator.core import scheduler
from coordinator.core.sched_index import Claims, FleetIndex, WorkerView
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from coordinator.core.inputs import WorkerMsg


def test_a_deferred_pass_places_nothing_until_the_batch_ends_then_places_once():
    f = Fleet(2)
    first = f.submit(2).job.id
    f.msg("w0", store_ready=wpb.StoreReady(job_id=first, store_port=4242))
    waiting = f.submit(2).job.id
    assert f.job(waiting).state == pb.QUEUED
    for rank, wid in enumerate(("w0", "w1")):
        out = f.ctl.handle(WorkerMsg(f.conns[wid], wpb.WorkerMessage(done=wpb.JobDone(
            job_id=first, rank=rank, ok=True))), place=False)
        assert out.sends == []  # freed, but nobody placed yet
    assert f.job(first).state == pb.SUCCEEDED and f.job(waiting).state == pb.QUEUED
    out = f.ctl.place_due()
    assert f.job(waiting).state == pb.RUNNING
    assert sends(out) == [("w0", "assignment")]  # a new group: rank 0 first, to bind its store
    assert f.ctl.place_due().sends == []  # nothing left due


def test_a_user_input_runs_the_pass_a_batch_left_due():
    f = Fleet(1)
    first = f.submit(1).job.id
    f.ctl.handle(WorkerMsg(f.conns["w0"], wpb.WorkerMessage(done=wpb.JobDone(job_id=first, rank=0, ok=True))),
                 place=False)
    out = f.submit(1)  # placed in its own input: the deferred pass ran there
    assert out.job.id and f.job(out.job.id).state == pb.RUNNING


def test_a_check_naming_every_worker_reserves_them_host_by_host_in_device_order():
    hosts, per_host = 40, 8
    views = [WorkerView(worker_id=f"h{h:02}-d{d}", host=f"h{h:02}", device_index=d, backend="gloo",
                        device_type="cpu", device_name="cpu", memory_bytes=1 << 34, idle=True)
             for h in range(hosts) for d in range(per_host)]
    fleet = FleetIndex()
    for v in views:
        fleet.put(v)
    need = scheduler.Need(world_size=len(views), worker_ids=tuple(v.worker_id for v in reversed(views)))
    order = [f"h{h:02}" for h in reversed(range(hosts))]
    held = fleet.idle_in(need, "gloo", order, Claims(len(views)))
    assert [w.worker_id for w in held] == [f"h{h:02}-d{d}" for h in reversed(range(hosts)) for d in range(per_host)]
    # The same as asking host by host (what a pass did before, once per host of the list).
    assert held == [w for h in order for w in fleet.idle_on(need, "gloo", h, Claims(len(views)))]
