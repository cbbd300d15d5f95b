"""Baselines, regressions and localization on 8 hosts made of network namespaces (netbed.py):
the coordinator on h0, one CPU worker on each of h1-h8, gloo across hosts.

25 clean 8-rank all_reduce sweeps build the baseline (the first 5 teach it, the other 20 are
judged: none may raise a regression); then h5's link is rate-limited with tc tbf (20 mbit, both
directions) and the next sweeps raise a regression with its evidence; `localize` names h5 in at
most ceil(log2 8) + 2 = 5 rounds (two rounds
confirm the culprit, each with other padding). The baseline table is kept on the test's side (a MemoryJobStore
fed through coordinator/baselines.record, exactly what the control core calls when it stores a
row), so the rule is judged on real results whether or not this coordinator annotates them.

Why 20 mbit and not 200: on the shared 2-core machine, 8 gloo ranks reach only about 0.06 GB/s
busbw clean (CPU-bound), with clean runs from 0.010 to 0.089; 200 mbit brought them to 0.02, a
drop inside that noise (one run of this test raised the regression, the next did not).
"""

from __future__ import annotations

import statistics
import time

import pytest

from coordinator.health import baselines as bl
from coordinator.store.memory import MemoryJobStore
from hostcluster import bed_cluster
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.multihost

WORKERS = {f"w{i}": f"h{i}" for i in range(1, 9)}
SLOW_HOST = "h5"
CLEAN_LEARN, CLEAN_JUDGED, SLOW_RUNS = bl.MIN_SAMPLES, 20, 3


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    with bed_cluster(tmp_path_factory.mktemp("baselines"), "open", WORKERS) as (bed, c):
        yield bed, c


def sweep(c) -> pb.Job:
    job = c.wait_job(c.submit(world_size=8, workers=list(WORKERS), op="all_reduce", sizes=[1 << 20], iters=5).id,
                     timeout=300)
    assert job.state == pb.SUCCEEDED, job.reason
    return job


def feed(store, job: pb.Job) -> list[bl.Regression]:
    kf = bl.KeyFields(gpu_model="cpu", ranks=len(job.workers), hosts=len({w.host for w in job.workers}))
    return [reg for r in job.results if (reg := bl.record(store, r, kf, at=time.time())) is not None]


def test_regression_raised_and_slow_host_localized_clean_runs_silent(bed):
    bed, c = bed
    store = MemoryJobStore()
    clean, false_alerts = [], []
    for i in range(CLEAN_LEARN + CLEAN_JUDGED):
        job = sweep(c)
        clean.append(job.results[0].busbw_gbps)
        regs = feed(store, job)
        if i >= CLEAN_LEARN:
            false_alerts += regs
    [entry] = store.baselines()
    print(f"clean busbw GB/s: min {min(clean):.3f} median {statistics.median(clean):.3f} max {max(clean):.3f}; "
          f"baseline {entry.median_busbw_gbps:.3f} MAD {entry.mad_busbw_gbps:.3f} threshold {bl.threshold(entry):.3f}; "
          f"false regressions in {CLEAN_JUDGED} judged clean runs: {len(false_alerts)}")
    assert false_alerts == []

    bed.rate_limit(SLOW_HOST, "20mbit")  # both ends of its cable
    slow, regs = [], []
    for _ in range(SLOW_RUNS):
        job = sweep(c)
        slow.append(job.results[0].busbw_gbps)
        regs += feed(store, job)
    print(f"slow busbw GB/s: {[round(x, 4) for x in slow]}; " + "; ".join(r.describe() for r in regs))
    assert regs and regs[0].ratio < 0.5

    t0 = time.monotonic()
    result = c.client.localize(pb.LocalizeRequest(job_id=job.id, tolerance=0.5))
    print(f"localize: {result.verdict} in {time.monotonic() - t0:.1f} s")
    assert list(result.culprit_hosts) == [SLOW_HOST] and list(result.culprits) == ["w5"], result
    assert result.rounds <= 5
