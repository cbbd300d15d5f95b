"""A failed rendezvous poisons nothing (issue 18, item 1), end to end on CPU (gloo).

A rank whose executor is stopped during rendezvous leaves its peer waiting on the store; before
the fix, the peer's executor was kept after its failed init_process_group, torch had advanced its
group counter, and every later new group on that pair timed out under keys no fresh peer used.
"""

import os
import signal
import time

import pytest

from cluster import executor_pid
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration

SHORT = dict(op="all_reduce", sizes=[4096, 65536], iters=3, warmup=1)


def test_a_rank_stopped_during_rendezvous_is_named_and_poisons_no_later_group(fresh_cluster):
    c = fresh_cluster
    ids = ["w0", "w1"]
    c.start(ids)
    victim = executor_pid(c.workers["w1"].pid)
    os.kill(victim, signal.SIGSTOP)  # idle: it never reads the Run, so never joins the store
    stopped_at = time.monotonic()
    try:
        job = c.submit(workers=ids, **SHORT)  # default deadlines: op 120 s, rendezvous 30 s
        first = c.wait_job(job.id, timeout=90)
        elapsed = time.monotonic() - stopped_at
    finally:
        try:
            os.kill(victim, signal.SIGCONT)
        except ProcessLookupError:
            pass  # already replaced
    print(f"rendezvous with a stopped rank ended after {elapsed:.1f} s: {first.reason}")
    assert first.state == pb.FAILED
    # The next job forms a new group on the same pair (its keys fresh on both ranks), the
    # three after it run on that group.
    for n in range(4):
        c.wait_idle(ids, timeout=60)
        later = c.wait_job(c.submit(workers=ids, **SHORT).id, timeout=60)
        assert later.state == pb.SUCCEEDED, f"job {n + 2}: {later.reason}"
        assert later.warm_start == (n > 0), f"job {n + 2}"
    assert first.reason.startswith("rank 1 (worker w1)"), first.reason  # the cause first, its victim after
    assert elapsed < 15, f"the stopped rank was named after {elapsed:.1f} s: {first.reason}"
