"""Gang placement decisions, as a pure function of queue and fleet."""

from coordinator.groups import new_key
from coordinator.scheduler import PendingJob, WorkerView, plan
from ringleader import jobspec
from ringleader.v1 import jobs_pb2 as pb


def w(wid, host="h1", idx=0, idle=True, backend="nccl", name="NVIDIA H200", mem=140 << 30, dtype="cuda"):
    return WorkerView(wid, host, dtype, idx, name, mem, backend, idle)


def job(jid, n=2, prio=0, t=0.0, **kw):
    return PendingJob(jid, n, prio, t, **kw)


def test_places_whole_gang_or_nothing():
    p = plan([job("a", n=3)], [w("w0"), w("w1", idx=1)])
    assert p.decisions == []
    assert p.waiting["a"] == "needs 3 workers, 2 connected"


def test_fleet_large_enough_but_busy_says_idle_count():
    p = plan([job("a", n=2)], [w("w0"), w("w1", idx=1, idle=False)])
    assert p.waiting["a"] == "needs 2 workers, 1 idle"


def test_same_host_ranks_adjacent():
    fleet = [w("b1", "hB", 1), w("a0", "hA", 0), w("b0", "hB", 0), w("a1", "hA", 1)]
    p = plan([job("a", n=4)], fleet)
    assert p.decisions[0].worker_ids == ("a0", "a1", "b0", "b1")


def test_disjoint_jobs_start_together():
    fleet = [w(f"w{i}", idx=i) for i in range(4)]
    p = plan([job("a", t=1), job("b", t=2)], fleet)
    assert [d.job_id for d in p.decisions] == ["a", "b"]
    assert not set(p.decisions[0].worker_ids) & set(p.decisions[1].worker_ids)


def test_priority_then_fifo():
    fleet = [w("w0"), w("w1", idx=1)]
    p = plan([job("old", t=1), job("urgent", prio=5, t=2)], fleet)
    assert [d.job_id for d in p.decisions] == ["urgent"]


def test_large_job_reserves_idle_workers_so_small_ones_cannot_starve_it():
    fleet = [w("w0"), w("w1", idx=1), w("w2", idx=2, idle=False)]
    p = plan([job("big", n=3, t=1), job("small", n=1, t=2)], fleet)
    assert p.decisions == []
    assert set(p.waiting) == {"big", "small"}


def test_job_larger_than_fleet_blocks_nobody():
    fleet = [w("w0"), w("w1", idx=1)]
    p = plan([job("huge", n=8, t=1), job("small", n=2, t=2)], fleet)
    assert [d.job_id for d in p.decisions] == ["small"]
    assert p.waiting["huge"] == "needs 8 workers, 2 connected"


def test_aging_lets_an_old_job_overtake_higher_priority():
    fleet = [w("w0"), w("w1", idx=1)]
    p = plan([job("old", t=0), job("vip", prio=1, t=599)], fleet)
    assert [d.job_id for d in p.decisions] == ["old"]


def test_constraints_host_model_ids_device_type_memory():
    fleet = [w("a", "h1", 0), w("b", "h2", 0, name="NVIDIA H100"), w("c", "h2", 1), w("d", "h3", 0, mem=1 << 30)]
    assert plan([job("j", n=1, host="h2", gpu_model="h200")], fleet).decisions[0].worker_ids == ("c",)
    assert plan([job("j", n=2, worker_ids=("d", "b"))], fleet).decisions[0].worker_ids == ("b", "d")
    assert "matching device_type=cpu" in plan([job("j", n=1, device_type="cpu")], fleet).waiting["j"]
    big = plan([job("j", n=4, needs_bytes=2 << 30)], fleet)
    assert big.waiting["j"] == "needs 4 workers, 3 connected"


def test_backend_capability_filters_workers():
    fleet = [w("g0", backend="gloo", dtype="cpu"), w("g1", idx=1, backend="gloo", dtype="cpu")]
    assert plan([job("j", backends=frozenset({"nccl"}))], fleet).decisions == []
    assert plan([job("j", backends=frozenset({"nccl", "gloo"}))], fleet).decisions[0].backend == "gloo"


def test_pending_job_of_a_checked_spec_lists_the_backends_that_run_it():
    valid = jobspec.normalize(pb.JobSpec(world_size=2, placement=pb.Placement(host="h1"), collective=pb.CollectiveSpec(
        op="all_reduce", dtype="int32", reduce_op="avg", sizes=[1 << 20])))
    p = PendingJob.of("j", valid, 5.0)
    assert (p.backends, p.host, p.world_size, p.submitted_at) == (frozenset({"nccl"}), "h1", 2, 5.0)
    assert p.needs_bytes == valid.needs_bytes == 2 << 20


def test_gang_never_mixes_backends():
    fleet = [w("g0", backend="gloo", dtype="cpu"), w("n0", idx=1)]
    p = plan([job("j", n=2)], fleet)
    assert p.decisions == []


def test_warm_group_is_preferred_and_keeps_its_order():
    key = new_key("abc", 2)
    fleet = [w("w0"), w("w1", idx=1), w("w2", idx=2), w("w3", idx=3)]
    d = plan([job("j", n=2)], fleet, groups={key: ("w3", "w2")}).decisions[0]
    assert (d.worker_ids, d.warm_group) == (("w3", "w2"), key)


def test_warm_group_with_a_busy_or_absent_member_is_not_reused():
    key = new_key("abc", 2)
    fleet = [w("w0"), w("w2", idx=2, idle=False), w("w3", idx=3)]
    d = plan([job("j", n=2)], fleet, groups={key: ("w2", "w3")}).decisions[0]
    assert (d.worker_ids, d.warm_group) == (("w0", "w3"), "")
    d = plan([job("j", n=2)], [w("w0"), w("w3", idx=3)], groups={key: ("w2", "w3")}).decisions[0]
    assert d.warm_group == ""
