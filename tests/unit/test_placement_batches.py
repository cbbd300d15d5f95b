"""Worker messages in batches: the placement pass they call for runs once, when the batch ends
(inputs handled alone, each Out saying a pass is due, then one `Place` input), and a job naming a whole fleet costs a
pass a walk of its list, not one per host."""

from __future__ import annotations

from test_control import Fleet, sends

from coordinator.core import scheduler
from coordinator.core.sched_index import Claims, FleetIndex, WorkerView
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from coordinator.core.inputs import Place, WorkerMsg


def test_a_deferred_pass_places_nothing_until_the_batch_ends_then_places_once():
    f = Fleet(2)
    first = f.submit(2).job.id
    f.msg("w0", store_ready=wpb.StoreReady(job_id=first, store_port=4242))
    waiting = f.submit(2).job.id
    assert f.job(waiting).state == pb.QUEUED
    for rank, wid in enumerate(("w0", "w1")):
        out = f.ctl.alone(WorkerMsg(f.conns[wid], wpb.WorkerMessage(done=wpb.JobDone(
            job_id=first, rank=rank, ok=True))))
        assert out.sends == [] and out.place  # freed, but nobody placed yet
    assert f.job(first).state == pb.SUCCEEDED and f.job(waiting).state == pb.QUEUED
    out = f.ctl.alone(Place())
    assert f.job(waiting).state == pb.RUNNING and not out.place
    assert sends(out) == [("w0", "assignment")]  # a new group: rank 0 first, to bind its store
    assert f.ctl.alone(Place()).sends == []  # nothing left due


def test_a_user_input_runs_the_pass_a_batch_left_due():
    f = Fleet(1)
    first = f.submit(1).job.id
    f.ctl.alone(WorkerMsg(f.conns["w0"], wpb.WorkerMessage(done=wpb.JobDone(job_id=first, rank=0, ok=True))))
    out = f.submit(1)  # the pass its Out asks for places both
    assert out.job.id and f.job(out.job.id).state == pb.RUNNING


def test_a_pass_stops_at_its_ranks_and_the_next_pass_starts_the_rest():
    f = Fleet(6, pass_ranks=3)
    big = f.submit(6).job.id
    f.msg("w0", store_ready=wpb.StoreReady(job_id=big, store_port=4242))
    small = [f.submit(2).job.id for _ in range(3)]
    for rank in range(6):  # the whole fleet freed in one batch
        f.ctl.alone(WorkerMsg(f.conns[f"w{rank}"], wpb.WorkerMessage(done=wpb.JobDone(
            job_id=big, rank=rank, ok=True))))
    out = f.ctl.alone(Place())
    states = [f.job(j).state for j in small]
    assert states == [pb.RUNNING, pb.RUNNING, pb.QUEUED]  # 2 + 2 ranks: past 3, the pass stopped
    assert f.job(small[2]).reason == "needs 2 workers: next placement pass (a pass starts at most --pass-ranks ranks)"
    assert out.place  # and says the rest is due
    out = f.ctl.alone(Place())
    assert f.job(small[2]).state == pb.RUNNING and not out.place


def test_a_pass_pool_gives_the_fullest_hosts_as_a_fresh_sort_would_after_every_take():
    """HostPool is counted once a pass and kept by each take (a lazy heap): after any takes its
    fullest hosts are those a sort of the counts left gives (most workers, then fewer untrusted
    idle workers, then the name), as far as the workers asked for."""
    import random

    from coordinator.core.claims import HostPool

    rng = random.Random(7)
    for _ in range(50):
        counts = {f"h{i:02}": rng.randint(1, 8) for i in range(rng.randint(1, 30))}
        doubtful = {h: rng.randint(0, 2) for h in counts if rng.random() < 0.3}
        pool = HostPool(dict(counts), doubtful)
        for _ in range(40):
            if counts and rng.random() < 0.6:
                host = rng.choice(sorted(counts))
                pool.took(host)
                counts[host] -= 1
                if not counts[host]:
                    del counts[host]
            want = rng.randint(1, 12)
            order = sorted(counts, key=lambda h: (-counts[h], doubtful.get(h, 0), h))
            expected, left = [], want
            for h in order:
                if left <= 0:
                    break
                expected.append(h)
                left -= counts[h]
            assert pool.fullest(want) == expected
            assert pool.total == sum(counts.values()) and dict(pool) == counts


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
    held = fleet.idle_in(need, ("gloo", ""), order, Claims(len(views)))
    assert [w.worker_id for w in held] == [f"h{h:02}-d{d}" for h in reversed(range(hosts)) for d in range(per_host)]
    # The same as asking host by host (what a pass did before, once per host of the list).
    assert held == [w for h in order for w in fleet.idle_on(need, ("gloo", ""), h, Claims(len(views)))]
