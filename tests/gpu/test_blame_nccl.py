"""Blame in seconds on NCCL: with the default op deadline (120 s), a SIGSTOPped executor
mid-op fails its job within 10 s naming its rank, and the pair runs the next job. On the one-GPU
machine this runs on the shared-GPU fleet (RINGLEADER_TEST_SHARED_GPU=N: NCCL's socket transport)."""

import os
import signal
import time

import pytest
from cluster import executor_pid

from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.gpu


def test_a_stopped_nccl_executor_is_named_within_10_s(gpu_cluster):
    c = gpu_cluster
    ids = ["g0", "g1"]
    c.wait_idle(ids, timeout=300)
    job = c.submit(workers=ids, op="all_reduce", sizes=[1 << 20], iters=100000, warmup=0)
    assert c.client.get(job.id).spec.op_timeout_s == 120  # the default deadline
    c.wait_job(job.id, states=(pb.RUNNING,), timeout=300)
    time.sleep(3)  # past the group's init, inside the timed loop
    pid = executor_pid(c.workers["g1"].pid)
    os.kill(pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        done = c.wait_job(job.id, timeout=120)
        elapsed = time.monotonic() - stopped_at
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    print(f"NCCL: stopped executor named {elapsed:.1f} s after SIGSTOP: {done.reason}")
    assert done.state == pb.FAILED
    assert "rank 1 (worker g1)" in done.reason, done.reason
    assert elapsed < 10, elapsed
    c.wait_idle(ids, timeout=300)
    again = c.wait_job(c.submit(workers=ids, op="all_reduce", sizes=[1 << 20], iters=5, warmup=1).id, timeout=300)
    assert again.state == pb.SUCCEEDED, again.reason
