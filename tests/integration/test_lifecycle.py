"""Gangs that change shape, repeated cancels and a stuck rank, end to end on CPU (gloo).

Real coordinator and worker daemon processes; the warm-group lifecycle, the daemon's
never-exit rule and executor health as the issue "Gangs that change shape" asks for them.
"""

import os
import signal
import time

import pytest

from cluster import executor_pid
from kept_fleet import cancel_unfinished
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration

LONG = dict(op="all_reduce", sizes=[1 << 20], iters=100000, warmup=0)  # runs until stopped
SHORT = dict(op="all_reduce", sizes=[4096, 1 << 20], iters=5, warmup=1)


@pytest.fixture(scope="module")
def fleet(own_cluster):
    """One coordinator and four workers for the module (each start costs a daemon and a forkserver
    importing torch): every test ends with its daemons up and idle, and checks so on entry."""
    return own_cluster


def _start(c, n: int) -> list[str]:
    """The first `n` workers, after checking that the whole fleet is up and idle."""
    every = [f"w{i}" for i in range(4)]
    cancel_unfinished(c)  # what an earlier test's failure left running: one failure, not three
    assert all(p.poll() is None for p in c.workers.values()), "a daemon of the module's fleet exited"
    c.wait_idle(every, timeout=30)
    return every[:n]


def _partial_groups(c) -> dict[str, list[str]]:
    """Groups held by fewer workers than they have members (a key is TOKEN/SIZE): none may last."""
    holders: dict[str, list[str]] = {}
    for w in c.client.workers():
        if w.warm_group:
            holders.setdefault(w.warm_group, []).append(w.worker_id)
    return {k: v for k, v in holders.items() if len(v) != int(k.rsplit("/", 1)[1])}


def test_gangs_of_every_shape_in_a_row_and_side_by_side(fleet):
    c = fleet
    ids = _start(c, 4)
    for n in (4, 2, 4, 2, 3, 4, 2, 2, 4, 1, 3, 4):
        done = c.wait_job(c.submit(world_size=n, **SHORT).id)
        assert done.state == pb.SUCCEEDED, (n, done.reason)
        assert all(r.wrong == 0 for r in done.results)
        c.wait_idle(ids)
        # A group that lost a member to another gang is dropped by all its members.
        deadline = time.monotonic() + 10
        while (partial := _partial_groups(c)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not partial, (n, partial)
    # Two 2-rank gangs on disjoint workers at once, then both again on their warm groups.
    for round_ in range(2):
        jobs = [c.submit(workers=pair, **SHORT) for pair in (["w0", "w1"], ["w2", "w3"])]
        done = [c.wait_job(j.id) for j in jobs]
        assert all(d.state == pb.SUCCEEDED for d in done), [d.reason for d in done]
        assert all(d.warm_start for d in done) == (round_ == 1)
        c.wait_idle(ids)
    assert all(p.poll() is None for p in c.workers.values())


@pytest.mark.parametrize("cycles", [50, pytest.param(200, marks=pytest.mark.slow)])
def test_submit_then_cancel_cycles_leave_every_daemon_up_and_idle(fleet, cycles):
    """50 cycles in `make test`; 200 in `make test-slow` (CI runs both): 25 CPU-s on 2 cores."""
    c = fleet
    ids = _start(c, 2)
    slowest = 0.0
    for cycle in range(cycles):
        job = c.submit(workers=ids, **LONG)
        if cycle % 2:  # every other cycle cancels a job that has started; the rest as soon as queued
            c.wait_job(job.id, states=(pb.RUNNING,), timeout=30)
        cancelled_at = time.monotonic()
        assert c.client.cancel(job.id).state == pb.CANCELLED
        c.wait_idle(ids, timeout=10)
        slowest = max(slowest, time.monotonic() - cancelled_at)
        exited = {w: p.returncode for w, p in c.workers.items() if p.poll() is not None}
        assert not exited, f"cycle {cycle}: daemons exited {exited}"
    print(f"{cycles} cycles: slowest cancel-to-idle {slowest:.2f} s")
    done = c.wait_job(c.submit(workers=ids, **SHORT).id)
    assert done.state == pb.SUCCEEDED, done.reason


def test_a_stopped_executor_is_named_within_op_timeout_plus_5_s(fleet):
    c = fleet
    ids = _start(c, 2)
    job = c.submit(workers=ids, **LONG)
    spec = c.client.get(job.id).spec
    assert spec.op_timeout_s == 120  # the default; this test sets its own below
    c.client.cancel(job.id)
    c.wait_idle(ids, timeout=10)
    timed = c.client.submit(pb.JobSpec(world_size=2, op_timeout_s=10, placement=pb.Placement(worker_ids=ids),
                                       collective=pb.CollectiveSpec(**LONG)))
    c.wait_job(timed.id, states=(pb.RUNNING,))
    time.sleep(1.5)  # inside the timed loop
    victim = executor_pid(c.workers["w1"].pid)
    os.kill(victim, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        done = c.wait_job(timed.id, timeout=30)
        elapsed = time.monotonic() - stopped_at
    finally:
        try:
            os.kill(victim, signal.SIGCONT)
        except ProcessLookupError:
            pass  # already replaced
    assert done.state == pb.FAILED
    assert "rank 1 (worker w1) is not responding (process stopped)" in done.reason, done.reason
    assert "rank 0 (worker w0) is not responding" not in done.reason
    assert elapsed < 10 + 5, elapsed
    print(f"stopped executor named {elapsed:.1f} s after SIGSTOP (op_timeout_s 10): {done.reason}")
    c.wait_idle(ids, timeout=30)
    assert c.wait_job(c.submit(workers=ids, **SHORT).id).state == pb.SUCCEEDED
