"""Failures end to end: a worker or executor killed mid-job, a coordinator restart."""

import os
import signal
import time
import pytest

from cluster import executor_pid

from ringleader.v1 import jobs_pb2 as pb
from worker.supervisor import process_state

pytestmark = pytest.mark.integration

LONG = dict(op="all_reduce", sizes=[8 << 20], iters=100000, warmup=0)  # runs until killed


@pytest.fixture(scope="module")
def cluster(own_cluster):
    """This module kills and stops its workers: a cluster of its own, not the shared one."""
    return own_cluster


def _executor_pid(cluster, worker_id: str) -> int:
    return executor_pid(cluster.workers[worker_id].pid)


def _wait_running_with_progress(cluster, job_id):
    cluster.wait_job(job_id, states=(pb.RUNNING,))
    time.sleep(1.5)  # inside the timed loop by now


def test_worker_killed_mid_job_fails_it_naming_the_rank(cluster):
    cluster.wait_idle(["w0", "w1", "w2", "w3"])
    job = cluster.submit(workers=["w0", "w3"], **LONG)
    done, elapsed = cluster.kill_during(job.id, "w3")
    assert elapsed < 10
    assert done.state == pb.FAILED
    assert "rank 1 (worker w3)" in done.reason, done.reason
    # The survivor drops its broken group, is idle again, and the next job succeeds.
    cluster.wait_idle(["w0"], timeout=30)
    nxt = cluster.wait_job(cluster.submit(workers=["w0", "w1"], op="all_reduce").id)
    assert nxt.state == pb.SUCCEEDED, nxt.reason
    assert not nxt.warm_start


def test_a_killed_daemon_leaves_no_executor_behind_even_one_waiting_on_a_wedged_peer(fresh_cluster):
    """An executor waiting in a collective on a peer that never answers (a dead NCCL peer spins)
    never reads its daemon's closed pipe, and it kept its forkserver, and so itself, alive: on
    2 x H200 a killed daemon's executor held its GPU at 100 % for minutes. It must die with its
    daemon."""
    c = fresh_cluster
    c.start(["r0", "r1"])
    job = c.submit(workers=["r0", "r1"], **LONG)
    c.wait_job(job.id, states=(pb.RUNNING,))
    time.sleep(1.5)
    peer_daemon = c.workers["r0"].pid
    peer, orphan = executor_pid(peer_daemon), executor_pid(c.workers["r1"].pid)
    os.kill(peer_daemon, signal.SIGSTOP)  # the peer wedged, and its daemon cannot replace it
    os.kill(peer, signal.SIGSTOP)
    try:
        time.sleep(0.5)  # r1's executor now waits in its collective
        c.kill_worker("r1")
        deadline = time.monotonic() + 5
        while os.path.exists(f"/proc/{orphan}") and time.monotonic() < deadline:
            time.sleep(0.05)
        state = process_state(orphan)
        assert state in ("", "Z"), f"r1's executor {orphan} outlived its daemon by 5 s (state {state})"
    finally:
        os.kill(peer, signal.SIGCONT)
        os.kill(peer_daemon, signal.SIGCONT)


def test_executor_killed_fails_job_but_daemon_survives(cluster):
    cluster.wait_idle(["w0", "w1"])
    job = cluster.submit(workers=["w0", "w1"], **LONG)
    _wait_running_with_progress(cluster, job.id)
    os.kill(_executor_pid(cluster, "w1"), signal.SIGKILL)
    done = cluster.wait_job(job.id, timeout=30)
    assert done.state == pb.FAILED
    assert "rank 1 (worker w1) failed: executor process killed by signal 9" in done.reason, done.reason
    assert cluster.workers["w1"].poll() is None, "the daemon must survive its executor"
    cluster.wait_idle(["w0", "w1"], timeout=60)
    w1 = next(w for w in cluster.client.workers() if w.worker_id == "w1")
    assert w1.executor_restarts == 1
    nxt = cluster.wait_job(cluster.submit(workers=["w0", "w1"], op="all_reduce").id)
    assert nxt.state == pb.SUCCEEDED, nxt.reason


def test_cancel_running_job_frees_its_workers(cluster):
    cluster.wait_idle(["w0", "w1"])
    job = cluster.submit(workers=["w0", "w1"], **LONG)
    _wait_running_with_progress(cluster, job.id)
    assert cluster.client.cancel(job.id).state == pb.CANCELLED
    cluster.wait_idle(["w0", "w1"], timeout=30)


def test_coordinator_restart_keeps_queued_jobs(fresh_cluster):
    c = fresh_cluster
    address = c.start_coordinator()
    queued = [c.submit(op="all_reduce").id, c.submit(op="all_gather").id]  # no workers yet
    assert all(c.client.get(j).state == pb.QUEUED for j in queued)
    c.stop_coordinator(signal.SIGKILL)  # no chance to flush anything: SQLite/WAL must hold it
    c.start_coordinator(port=int(address.rsplit(":", 1)[1]))
    c.start_worker("r0")
    c.start_worker("r1")
    for job_id in queued:
        done = c.wait_job(job_id)
        assert done.state == pb.SUCCEEDED, done.reason
        assert all(r.wrong == 0 for r in done.results)


def _restart_coordinator(c, sig: int = signal.SIGTERM) -> None:
    """Stop the module's coordinator and start it again on its port and database: its workers
    stay up and must find it again by themselves."""
    port = int(c.address.rsplit(":", 1)[1])
    c.stop_coordinator(sig)
    c.start_coordinator(port=port)


def test_workers_reconnect_after_coordinator_restart(cluster):
    c = cluster  # the module's own: its daemons stay up across the restart, as a fleet's would
    ids = sorted(c.workers)  # those the module's earlier tests left running (one was killed)
    c.wait_idle(ids)
    _restart_coordinator(c)
    c.wait_idle(ids, timeout=60)
    done = c.wait_job(c.submit(op="broadcast").id)
    assert done.state == pb.SUCCEEDED, done.reason


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_running_job_survives_coordinator_restart(cluster, sig):
    """Killed or stopped: a coordinator that stops drops its streams, and their ends must not fail
    the running job in the store (a graceful stop once did, after the core had stopped)."""
    c = cluster
    c.wait_idle(["w0", "w1"])
    job = c.submit(workers=["w0", "w1"], op="all_reduce", sizes=[1 << 20, 2 << 20], iters=2000, warmup=0)
    c.wait_job(job.id, states=(pb.RUNNING,))
    time.sleep(1)
    _restart_coordinator(c, sig)
    # The workers re-register with the job they are running; the coordinator re-attaches it.
    done = c.wait_job(job.id, timeout=120)
    assert done.state == pb.SUCCEEDED, done.reason
    assert [r.size_bytes for r in done.results] == [1 << 20, 2 << 20]
    assert all(r.wrong == 0 for r in done.results)
    states = [ev.state.state for ev in c.client.watch(job.id) if ev.WhichOneof("event") == "state"]
    assert states == [pb.QUEUED, pb.RUNNING, pb.SUCCEEDED], "re-attached, not requeued"


def test_a_job_whose_group_was_forming_when_the_coordinator_died_runs_on(fresh_cluster):
    """Killed after placing a job on a new group and before rank 0 reported its store: the other
    rank was never sent its assignment, and comes back without the job. Rank 0 says its group is
    still forming, so that rank is assigned to its store now, and the job runs as placed (under a
    loaded machine this window was what made a re-attach a requeue). The fault holds rank 0
    before it binds its store, so the kill lands in that window every time."""
    c = fresh_cluster
    address = c.start_coordinator()
    for wid in ("f0", "f1"):  # only the job's rank 0 waits: the fault is on its path alone
        c.start_worker(wid, env={"RINGLEADER_FAULTS": "delay_store_s=4", "RINGLEADER_FAULTS_ALLOWED": "tests"})
    c.wait_idle(["f0", "f1"])
    job = c.submit(workers=["f0", "f1"], op="all_reduce", sizes=[1 << 20])
    c.wait_job(job.id, states=(pb.RUNNING,))
    c.stop_coordinator(signal.SIGKILL)
    c.start_coordinator(port=int(address.rsplit(":", 1)[1]))
    done = c.wait_job(job.id, timeout=120)
    assert done.state == pb.SUCCEEDED, done.reason
    assert all(r.wrong == 0 for r in done.results)
    states = [ev.state.state for ev in c.client.watch(job.id) if ev.WhichOneof("event") == "state"]
    assert states == [pb.QUEUED, pb.RUNNING, pb.SUCCEEDED], "assigned to the forming group, not requeued"


def test_silent_worker_is_declared_lost_after_missed_heartbeats(cluster):
    cluster.wait_idle(["w0", "w1"])
    job = cluster.submit(workers=["w0", "w1"], **LONG)
    _wait_running_with_progress(cluster, job.id)
    daemon = cluster.workers["w1"].pid
    os.kill(daemon, signal.SIGSTOP)  # the stream stays open, but nothing is sent any more
    try:
        stopped_at = time.monotonic()
        done = cluster.wait_job(job.id, timeout=30)
        assert time.monotonic() - stopped_at < 10
    finally:
        os.kill(daemon, signal.SIGCONT)
    assert done.state == pb.FAILED
    assert "rank 1 (worker w1) lost: no heartbeat for" in done.reason, done.reason
    cluster.wait_idle(["w0", "w1"], timeout=60)  # w1 reconnects once it runs again
    nxt = cluster.wait_job(cluster.submit(workers=["w0", "w1"], op="all_reduce").id)
    assert nxt.state == pb.SUCCEEDED, nxt.reason
