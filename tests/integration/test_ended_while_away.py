"""A job that ends while no coordinator listens (a restart, a failover) is taken as ended when the
coordinator is back, not run again: the daemons register with it (their JobDone still waiting to
be sent), the coordinator re-attaches it and takes their reports. Real processes on loopback."""

import signal
import sqlite3
import time
import urllib.request

import pytest

from ringleader.v1 import jobs_pb2 as pb
from ports import free_port

pytestmark = pytest.mark.integration


def states(db: str, job_id: str) -> list[str]:
    """The job's state events, in order, with their reasons: the assertion names the path taken."""
    with sqlite3.connect(db) as conn:
        blobs = [r[0] for r in conn.execute("SELECT blob FROM events WHERE job_id = ? ORDER BY n", (job_id,))]
    events = [pb.JobEvent.FromString(b) for b in blobs]
    return [f"{pb.JobState.Name(e.state.state)}: {e.state.reason}" for e in events if e.WhichOneof("event") == "state"]


def ranks_succeeded(metrics_url: str) -> float:
    """The daemon's count of job ranks ended SUCCEEDED: its Done is then in the outbox."""
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("ringleader_worker_jobs_total{") and 'outcome="succeeded"' in line)


def test_a_job_that_ended_while_the_coordinator_was_down_is_not_run_again(fresh_cluster):
    c = fresh_cluster
    port = free_port()
    c.start_coordinator(port=port)
    metrics = {}
    for wid in ("e0", "e1"):
        address = f"127.0.0.1:{free_port('127.0.0.1')}"
        c.start_worker(wid, metrics_address=address)
        metrics[wid] = f"http://{address}/metrics"
    c.wait_idle(metrics)
    job = c.submit(world_size=2, workers=["e0", "e1"], op="all_reduce", sizes=[1 << 10, 1 << 12], iters=400)
    deadline = time.monotonic() + 60
    while c.client.get(job.id).progress.done < 1:  # formed and past its first size: both ranks run it
        assert time.monotonic() < deadline, "the job never got going"
        time.sleep(0.02)
    c.stop_coordinator(signal.SIGKILL)
    while not all(ranks_succeeded(url) == 1 for url in metrics.values()):  # the job ends meanwhile
        assert time.monotonic() < deadline, "the job did not end on both daemons"
        time.sleep(0.05)
    c.start_coordinator(port=port)
    done = c.wait_job(job.id, timeout=120)
    assert done.state == pb.SUCCEEDED, done.reason
    path = states(c.db, job.id)
    assert sum(s.startswith("RUNNING") for s in path) == 1, path  # re-attached and finished, never placed again


def rejected(http_url: str) -> float:
    """Every worker report the coordinator refused, of any kind."""
    text = urllib.request.urlopen(f"{http_url}/metrics", timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("ringleader_worker_reports_rejected_total{"))


def test_workers_that_name_a_job_ended_before_the_restart_are_free_at_once(fresh_cluster):
    """Each daemon sends its last Done again after a reconnect (it cannot know whether the
    coordinator committed it: tests/integration/test_done_resent.py). For a job the coordinator
    had stored as ended, that Done frees the worker, nothing is refused, and the job is unchanged."""
    c = fresh_cluster
    c.start(["e0", "e1"])
    job = c.submit(world_size=2, workers=["e0", "e1"], op="all_reduce")
    assert c.wait_job(job.id).state == pb.SUCCEEDED
    time.sleep(0.5)  # well past the paced commit (coordinator/shell/facade.py COMMIT_EVERY_S)
    before = states(c.db, job.id)
    c.stop_coordinator(signal.SIGKILL)
    c.start_coordinator(port=int(c.address.rsplit(":", 1)[1]), http=True)
    c.wait_idle(["e0", "e1"])
    again = c.submit(world_size=2, workers=["e0", "e1"], op="all_reduce")
    assert c.wait_job(again.id).state == pb.SUCCEEDED
    assert states(c.db, job.id) == before
    assert rejected(c.http_url) == 0
