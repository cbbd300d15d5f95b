"""The step from a checked spec to the scheduler's view, field by field, and the scheduler's limits
at and beside them: written against the surviving mutants of `mutmut run` (pyproject.toml
[tool.mutmut]). Only the public surface (PendingJob.of, Need, plan, Scheduler) is used."""

from __future__ import annotations

import pytest

from coordinator.core.scheduler import Need, PendingJob, Scheduler, plan
from coordinator.core.sched_index import WorkerView
from ringleader import jobspec, states
from ringleader.v1 import jobs_pb2 as pb


def w(wid, host="h1", idx=0, name="NVIDIA H200", mem=140 << 30, backend="nccl", dtype="cuda", idle=True):
    return WorkerView(wid, host, dtype, idx, name, mem, backend, idle)


def pending(jid="j1", t=0.0, **spec) -> PendingJob:
    spec.setdefault("world_size", 2)
    spec.setdefault("collective", pb.CollectiveSpec(op="all_reduce", sizes=[1 << 20]))
    return PendingJob.of(jid, jobspec.normalize(pb.JobSpec(**spec)), t)


def test_pending_job_of_carries_every_field_of_the_checked_spec():
    placement = pb.Placement(host="node-3", gpu_model="H200", worker_ids=["a", "b"], device_type="cuda")
    p = pending("j7", 12.5, priority=-4, placement=placement)
    assert (p.job_id, p.priority, p.submitted_at, p.world_size) == ("j7", -4, 12.5, 2)
    assert p.need == Need(world_size=2, backends=frozenset({"nccl", "gloo"}), needs_bytes=2 << 20, host="node-3",
                          gpu_model="H200", worker_ids=("a", "b"), device_type="cuda")
    graph = pending(collective=pb.CollectiveSpec(op="all_reduce", graph=True))
    assert graph.need.backends == frozenset({"nccl"})  # what the backends can run, from the spec
    assert pending().need == Need(world_size=2, needs_bytes=2 << 20)  # no placement: no constraint


@pytest.mark.parametrize("field, value, eligible", [
    ("gpu_model", "H100", {"b0", "b1"}),
    ("device_type", "cpu", {"c0", "c1"}),
    ("host", "h2", {"b0", "b1"}),
])
def test_each_placement_field_reaches_the_placement(field, value, eligible):
    fleet = [w("a0", idx=0), w("a1", idx=1), w("b0", host="h2", name="NVIDIA H100"),
             w("b1", host="h2", idx=1, name="NVIDIA H100"),
             w("c0", host="h3", name="cpu", dtype="cpu", backend="gloo", mem=0),
             w("c1", host="h3", idx=1, name="cpu", dtype="cpu", backend="gloo", mem=0)]
    p = plan([pending(placement=pb.Placement(**{field: value}))], fleet)
    assert [set(d.worker_ids) for d in p.decisions] == [eligible]


def test_worker_ids_reach_the_placement_in_rank_order():
    fleet = [w("a0", idx=0), w("a1", idx=1), w("a2", idx=2)]
    p = plan([pending(placement=pb.Placement(worker_ids=["a2", "a0"]))], fleet)
    assert [d.worker_ids for d in p.decisions] == [("a0", "a2")]


def test_memory_limit_at_and_beside_it():
    need = pending().need.needs_bytes
    assert Need(world_size=1, needs_bytes=need).fits(w("x", mem=need).kind)
    assert not Need(world_size=1, needs_bytes=need).fits(w("x", mem=need - 1).kind)
    assert Need(world_size=1, needs_bytes=need).fits(w("x", mem=0).kind)  # unknown memory: no limit
    fleet = [w("s0", mem=need - 1), w("s1", idx=1, mem=need - 1), w("e0", host="h2", mem=need),
             w("e1", host="h2", idx=1, mem=need)]
    assert [d.worker_ids for d in plan([pending()], fleet).decisions] == [("e0", "e1")]


def test_constraints_are_spelled_out_in_the_waiting_reason():
    need = Need(world_size=2, host="h9", gpu_model="H200", worker_ids=("a", "b"), device_type="cuda")
    assert need.constraints() == " matching host=h9 gpu_model=H200 device_type=cuda worker_ids=a,b"
    assert Need(world_size=2).constraints() == ""
    p = plan([pending(placement=pb.Placement(host="h9"))], [w("a0")])
    assert p.waiting == {"j1": "needs 2 workers, 0 connected matching host=h9"}


def test_ranks_pack_onto_the_host_with_most_idle_workers():
    fleet = [w("b0", host="hb"), w("a0", host="ha"), w("a1", host="ha", idx=1), w("a2", host="ha", idx=2)]
    assert [d.worker_ids for d in plan([pending(world_size=3)], fleet).decisions] == [("a0", "a1", "a2")]
    four = plan([pending(world_size=4)], fleet).decisions
    assert [d.worker_ids for d in four] == [("a0", "a1", "a2", "b0")]  # hosts in order, ranks adjacent


def test_a_job_added_again_replaces_its_first_entry():
    s = Scheduler()
    for v in (w("a0"), w("a1", idx=1)):
        s.put_worker(v)
    s.add(pending("j1"))
    s.add(pending("j1", world_size=3))  # the same job, now needing more than the fleet has
    assert len(s) == 1 and s.place() == []
    assert s.reason("j1") == "needs 3 workers, 2 connected"


def test_an_unknown_state_allows_nothing_and_a_refusal_names_both_states():
    assert not states.JOBS.allowed("no-such-state", pb.RUNNING)
    assert not states.GROUPS.allowed("melted", states.WARM)
    with pytest.raises(states.IllegalTransition) as err:
        states.JOBS.check(pb.SUCCEEDED, pb.RUNNING)
    assert str(err.value) == "job: SUCCEEDED -> RUNNING is not an allowed transition"
