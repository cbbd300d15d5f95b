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


def running_starts(db: str, job_id: str) -> int:
    with sqlite3.connect(db) as conn:
        blobs = [r[0] for r in conn.execute("SELECT blob FROM events WHERE job_id = ? ORDER BY n", (job_id,))]
    events = [pb.JobEvent.FromString(b) for b in blobs]
    return sum(e.WhichOneof("event") == "state" and e.state.state == pb.RUNNING for e in events)


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
    assert running_starts(c.db, job.id) == 1  # re-attached and finished, never placed again
