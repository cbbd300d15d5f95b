"""Gang placement decisions, as a pure function of queue and fleet."""

import dataclasses
import random

from coordinator.core.groups import new_key
from coordinator.core.scheduler import AGING_S, Need, PendingJob, Scheduler, WorkerView, plan
from ringleader.spec import BACKENDS
from ringleader import jobspec
from ringleader.v1 import jobs_pb2 as pb


def w(wid, host="h1", idx=0, idle=True, backend="nccl", name="NVIDIA H200", mem=140 << 30, dtype="cuda"):
    return WorkerView(wid, host, dtype, idx, name, mem, backend, idle)


def job(jid, n=2, prio=0, t=0.0, **kw):
    return PendingJob(jid, prio, t, Need(n, **kw))


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
    assert (p.need.backends, p.need.host, p.world_size, p.submitted_at) == (frozenset({"nccl"}), "h1", 2, 5.0)
    assert p.need.needs_bytes == valid.needs_bytes == 2 << 20


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


def test_mixed_fleet_gang_that_needs_two_backends_reserves_nothing():
    fleet = [w("g0", "hc", backend="gloo", dtype="cpu"), w("n0", "hg")]
    p = plan([job("both", n=2, t=1), job("cpu", n=1, t=2, device_type="cpu"),
              job("gpu", n=1, t=3, device_type="cuda")], fleet)
    assert sorted((d.job_id, d.worker_ids) for d in p.decisions) == [("cpu", ("g0",)), ("gpu", ("n0",))]
    assert p.waiting == {"both": "needs 2 workers of one backend, 1 nccl, 1 gloo connected"}


def test_a_waiting_gang_reserves_only_the_backend_it_can_run_on():
    # 3 nccl workers (one busy) can run the gang later; the idle gloo workers are not its to hold.
    fleet = [w("n0"), w("n1", idx=1), w("n2", idx=2, idle=False),
             w("g0", "hc", backend="gloo", dtype="cpu"), w("g1", "hc", 1, backend="gloo", dtype="cpu")]
    p = plan([job("big", n=3, t=1), job("small", n=2, t=2)], fleet)
    assert [(d.job_id, d.backend) for d in p.decisions] == [("small", "gloo")]
    assert p.waiting == {"big": "needs 3 workers, 2 idle"}


def test_jobs_behind_a_blocked_one_of_the_same_need_see_no_idle_worker():
    fleet = [w("w0"), w("w1", idx=1, idle=False)]
    p = plan([job("a", n=2, t=1), job("b", n=2, t=2)], fleet)
    assert p.waiting == {"a": "needs 2 workers, 1 idle", "b": "needs 2 workers, 0 idle"}


def test_a_quarantined_worker_serves_only_jobs_that_name_it():
    q = dataclasses.replace(w("w1", idx=1), quarantined=True)
    fleet = [w("w0"), q, w("w2", idx=2)]
    p = plan([job("a", n=3)], fleet)
    assert p.decisions == [] and p.waiting["a"] == "needs 3 workers: 3 connected, 2 idle, 0 busy, 1 quarantined"
    p = plan([job("b", n=2)], fleet)
    assert p.decisions[0].worker_ids == ("w0", "w2")
    p = plan([job("c", n=1, worker_ids=("w1",))], fleet)
    assert p.decisions[0].worker_ids == ("w1",)
    p = plan([job("d", n=2)], [w("w0"), q], groups={new_key("g", 2): ("w0", "w1")})
    assert p.decisions == []  # not through a warm group either


def test_incremental_scheduler_follows_queue_and_fleet():
    s = Scheduler()
    s.add(job("a", n=2, t=1))
    s.add(job("b", n=1, t=2))
    assert s.place() == [] and s.reason("a") == "needs 2 workers, 0 connected"
    s.put_worker(w("w0", idle=False))
    s.put_worker(w("w1", idx=1))
    # a can run on the connected fleet: it holds the idle w1, so b (behind it) waits
    assert s.place() == []
    assert (s.reason("a"), s.reason("b")) == ("needs 2 workers, 1 idle", "needs 1 workers, 0 idle")
    s.put_worker(w("w0"))  # w0 finished its job
    assert [(d.job_id, d.worker_ids) for d in s.place()] == [("a", ("w0", "w1"))]
    assert "a" not in s and len(s) == 1 and s.reason("a") == ""
    s.remove("b")  # cancelled
    assert len(s) == 0 and s.place() == []
    s.drop_worker("w0")  # left
    s.add(job("c", n=2, t=3))
    assert s.place() == [] and s.reason("c") == "needs 2 workers, 1 connected"


def test_order_is_fixed_while_jobs_wait():
    # priority + waited / 60 s at any moment orders like submitted_at - 60 s * priority
    jobs = [job("p0", prio=0, t=100.0), job("p1", prio=1, t=130.0), job("p2", prio=2, t=230.0)]
    assert sorted(jobs, key=lambda j: j.order) == [jobs[1], jobs[0], jobs[2]]
    for now in (230.0, 300.0, 5000.0):
        aged = sorted(jobs, key=lambda j: (-(j.priority + (now - j.submitted_at) / AGING_S), j.submitted_at))
        assert aged == sorted(jobs, key=lambda j: j.order)


def test_many_cancelled_jobs_do_not_pile_up_in_a_group():
    s = Scheduler()
    s.add(job("head", n=4, t=0))
    for i in range(1, 1000):
        s.add(job(f"j{i}", n=4, t=i))
        s.remove(f"j{i}")
    group = s._groups[job("head", n=4).need]
    assert len(group.heap) < 100 and list(group.live) == ["head"]


# ---- the same decisions as a brute-force reading of the rules ----------------------------------

KINDS = [("cuda", "nccl", "NVIDIA H100", 80 << 30), ("cuda", "nccl", "NVIDIA H200", 140 << 30),
         ("cpu", "gloo", "cpu", 0)]


def eligible(need, v):
    """A quarantined worker only for a job that names it; otherwise the need's own rules."""
    return need.admits(dataclasses.replace(v, quarantined=False)) and (not v.quarantined or v.worker_id in need.worker_ids)


def held_back(need, n, fleet, reason):
    """With quarantined workers among the eligible ones, every count apart (coordinator/core/waiting.py)."""
    held = [v for v in fleet if v.quarantined and not need.worker_ids
            and need.admits(dataclasses.replace(v, quarantined=False))]
    if not held:
        return reason
    usable = [v for v in fleet if eligible(need, v)]
    idle = sum(v.idle for v in usable)
    return (f"needs {n} workers: {len(usable) + len(held)} connected, {idle} idle, {len(usable) - idle} busy, "
            f"{len(held)} quarantined{need.constraints()}")


def reference(queue, fleet, groups):
    """Every rule of the module docstring, applied job by job with full scans."""
    free = {v.worker_id: v for v in fleet if v.idle}
    decisions, waiting = [], {}
    for j in sorted(queue, key=lambda j: j.order):
        need, n = j.need, j.world_size
        matching = [v for v in fleet if eligible(need, v)]
        runnable = [b for b in BACKENDS if sum(v.backend == b for v in matching) >= n]
        if not runnable:
            per = {b: sum(v.backend == b for v in matching) for b in BACKENDS if b in need.backends}
            per = {b: k for b, k in per.items() if k}
            waiting[j.job_id] = held_back(need, n, fleet, (
                f"needs {n} workers of one backend, " + ", ".join(f"{k} {b}" for b, k in per.items())
                + f" connected{need.constraints()}"
                if len(per) > 1 else f"needs {n} workers, {sum(per.values())} connected{need.constraints()}"))
            continue
        idle = [v for v in free.values() if eligible(need, v) and v.backend in runnable]
        d = None
        for key, members in groups.items():
            ids = {v.worker_id: v for v in idle}
            if len(members) == n and all(m in ids for m in members) and len({ids[m].backend for m in members}) == 1:
                d = (j.job_id, members, ids[members[0]].backend, key)
                break
        for b in runnable if d is None else ():
            pool = [v for v in idle if v.backend == b]
            if len(pool) >= n:
                count = {h: sum(v.host == h for v in pool) for h in {v.host for v in pool}}
                pool.sort(key=lambda v: (-count[v.host], v.host, v.device_index, v.worker_id))
                chosen = sorted(pool[:n], key=lambda v: (v.host, v.device_index, v.worker_id))
                d = (j.job_id, tuple(v.worker_id for v in chosen), b, "")
                break
        if d:
            decisions.append(d)
            for wid in d[1]:
                free.pop(wid)
        else:
            for v in idle:
                free.pop(v.worker_id)
            waiting[j.job_id] = held_back(need, n, fleet, f"needs {n} workers, {len(idle)} idle{need.constraints()}")
    return decisions, waiting


def random_case(rng):
    hosts = [f"h{i}" for i in range(rng.randint(1, 4))]
    fleet = []
    for i in range(rng.randint(0, 12)):
        dtype, backend, name, mem = rng.choice(KINDS)
        fleet.append(WorkerView(f"w{i}", rng.choice(hosts), dtype, i, name, mem, backend, rng.random() < 0.7,
                                quarantined=rng.random() < 0.15))
    queue = []
    for i in range(rng.randint(0, 10)):
        ids = tuple(rng.sample([v.worker_id for v in fleet], k=min(len(fleet), rng.randint(1, 3)))) \
            if fleet and rng.random() < 0.15 else ()
        queue.append(job(
            f"j{i}", len(ids) or rng.choice([1, 1, 2, 2, 3, 4, 8]), rng.choice([0, 0, 1, 2]), float(rng.randint(0, 300)),
            backends=rng.choice([frozenset(BACKENDS), frozenset({"nccl"})]),
            needs_bytes=rng.choice([0, 0, 100 << 30]), host=rng.choice(["", "", *hosts]),
            gpu_model=rng.choice(["", "", "h200"]), worker_ids=ids, device_type=rng.choice(["", "", "cpu", "cuda"])))
    idle = [v.worker_id for v in fleet if v.idle]
    groups = {}
    for k in range(rng.randint(0, 3)):
        members = tuple(rng.sample(idle, k=min(len(idle), rng.randint(1, 3))))
        if members:
            groups[new_key(f"g{k}", len(members))] = members
    return queue, fleet, groups


def test_decisions_and_reasons_match_the_rules_read_plainly():
    rng = random.Random(1234)
    for _ in range(3000):
        queue, fleet, groups = random_case(rng)
        p = plan(queue, fleet, groups)
        decisions, waiting = reference(queue, fleet, groups)
        assert [(d.job_id, d.worker_ids, d.backend, d.warm_group) for d in p.decisions] == decisions, (queue, fleet)
        assert p.waiting == waiting, (queue, fleet)


def test_incremental_passes_match_one_shot_plans():
    rng = random.Random(99)
    for _ in range(300):
        queue, fleet, _ = random_case(rng)
        s = Scheduler()
        for v in fleet:
            s.put_worker(v)
        for j in queue:
            s.add(j)
        views = {v.worker_id: v for v in fleet}
        waiting = list(queue)
        for _ in range(4):  # a pass, then workers finish, leave or come back, and jobs arrive
            expected = plan(waiting, views.values())
            assert s.place() == expected.decisions
            assert {j.job_id: s.reason(j.job_id) for j in waiting if j.job_id in s} == expected.waiting
            started = {d.job_id for d in expected.decisions}
            waiting = [j for j in waiting if j.job_id not in started]
            for d in expected.decisions:
                for wid in d.worker_ids:
                    views[wid] = dataclasses.replace(views[wid], idle=False)
                    s.put_worker(views[wid])
            for wid in list(views):
                r = rng.random()
                if r < 0.2:
                    views[wid] = dataclasses.replace(views[wid], idle=True)
                    s.put_worker(views[wid])
                elif r < 0.25:
                    del views[wid]
                    s.drop_worker(wid)
            new = random_case(rng)[0][:2]
            for j in new:
                j = dataclasses.replace(j, job_id=f"{j.job_id}-{rng.random()}",
                                        need=dataclasses.replace(j.need, worker_ids=()))
                waiting.append(j)
                s.add(j)


def test_a_pass_walks_neither_the_queue_nor_the_fleet(monkeypatch):
    from coordinator.core.sched_index import FleetIndex

    visits = []
    real = FleetIndex.idle_hosts
    monkeypatch.setattr(FleetIndex, "idle_hosts", lambda self, *a: visits.append(a[0]) or real(self, *a))
    s = Scheduler()
    for i in range(64):  # 32 busy GPU workers, 32 idle CPU workers, on 8 hosts
        gpu = i < 32
        s.put_worker(w(f"w{i}", f"h{i // 8}", i % 8, idle=not gpu, backend="nccl" if gpu else "gloo",
                       dtype="cuda" if gpu else "cpu"))
    for i in range(10_000):  # GPU jobs of 40 different needs: all must wait
        s.add(job(f"g{i}", n=1 + i % 4, t=i, device_type="cuda", host="" if i % 10 else f"h{i % 4}"))
    assert s.place() == [] and visits == []  # none fits a kind with an idle worker
    assert s.reason("g5") == "needs 2 workers, 0 idle matching device_type=cuda"
    s.add(job("c", n=2, t=10_001, device_type="cpu"))
    assert [d.job_id for d in s.place()] == ["c"] and len(visits) == 1
    for i in range(32):  # every GPU worker busy, every CPU worker too
        s.put_worker(w(f"w{i + 32}", f"h{(i + 32) // 8}", i % 8, idle=False, backend="gloo", dtype="cpu"))
    visits.clear()
    assert s.place() == [] and visits == []


def test_healthy_workers_are_preferred_over_suspect_or_never_checked_ones():
    doubtful = dataclasses.replace(w("w0", host="h1"), trusted=False)
    # One host: the HEALTHY worker is taken first, whatever the device order.
    assert plan([job("a", n=1)], [doubtful, w("w1", idx=1)]).decisions[0].worker_ids == ("w1",)
    # Hosts with as many idle workers: the one without a doubtful worker first.
    p = plan([job("a", n=1)], [doubtful, w("w9", host="h9")])
    assert p.decisions[0].worker_ids == ("w9",)
    # A gang that needs it still gets it.
    assert plan([job("a", n=2)], [doubtful, w("w9", host="h9")]).decisions[0].worker_ids == ("w0", "w9")


def test_a_job_waiting_last_claims_its_idle_workers_only_when_a_later_job_is_walked(monkeypatch):
    from coordinator.core.sched_index import Claims

    taken = []
    real = Claims.take_all  # every claim goes through it (Claims.take too)
    monkeypatch.setattr(Claims, "take_all", lambda self, vs: taken.extend(v.worker_id for v in vs) or real(self, vs))
    s = Scheduler()
    for i in range(16):
        s.put_worker(w(f"w{i}", f"h{i // 4}", i % 4, idle=i % 4 != 0))
    every = tuple(f"w{i}" for i in range(16))  # a fleet-wide check: waits for all 16 at once, last in line
    s.add(job("check", n=16, prio=-1000, t=0, worker_ids=every))
    assert s.place() == [] and taken == []  # nobody behind it: nothing to keep off its workers
    # The reason names the first 8 ids and how many: a fleet-wide check's list ran to 2,500 ids.
    assert s.reason("check") == ("needs 16 workers, 12 idle matching worker_ids="
                                 + ",".join(every[:8]) + ",... (16 in all)")
    s.add(job("late", n=2, t=1, prio=-1001))  # behind it: must not take the workers it waits for
    assert s.place() == [] and sorted(taken) == sorted(f"w{i}" for i in range(16) if i % 4)
    assert s.reason("late") == "needs 2 workers, 0 idle"
