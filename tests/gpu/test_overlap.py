"""Gangs that change shape on NCCL: warm groups overlapping in every way, 0 failures, busbw kept.

Each world size first runs once on a fresh fleet (its reference busbw); then at least 20 jobs
follow whose gangs overlap the previous ones in every way: all of them then a subset, one half
then the other, odd sizes, a single rank, back to all, and two gangs side by side. Every job
must succeed with 0 wrong elements and keep its busbw within 3 % of the reference (a lost NCCL
init or a stale group would show as a hang, a failure or a slow job); on the shared-GPU fleet
(tests/gpu/fleet.py) only success and correctness are checked. The sequence, times and
ratios are printed: the figures for the closing note.
"""

import time

import pytest
from fleet import FLEET, SHARED, start_fleet

from cluster import Cluster
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.gpu

SIZE = 64 << 20 if SHARED else 1 << 30  # sockets move 1 GiB too slowly for a test
JOB = dict(op="all_reduce", sizes=[SIZE], iters=20, warmup=5, op_timeout_s=60)
TOLERANCE = 0.97


def _gangs(n: int) -> list[list[list[int]]]:
    """Steps of the sequence; each step is one gang or several gangs run side by side."""
    half, rest = list(range(n // 2)), list(range(n // 2, n))
    steps = [[list(range(n))], [half], [rest], [list(range(n))], [list(range(n - 1))], [[n - 1]],
             [[0, n - 1]], [list(range(n))], [half, rest], [half, rest], [list(range(1, n))],
             [[0]], [list(range(n))], [[1, 2 % n]], [list(range(n))], [rest], [half],
             [list(range(n))], [[0, 1]], [[0, 1]], [list(range(n))], [half, rest], [list(range(n))]]
    return [[sorted(set(g)) for g in step] for step in steps]


def _submit(c, ids, gang):
    members = [ids[i] for i in gang]
    spec = pb.JobSpec(world_size=len(members), op_timeout_s=JOB["op_timeout_s"],
                      placement=pb.Placement(worker_ids=members),
                      collective=pb.CollectiveSpec(**{k: v for k, v in JOB.items() if k != "op_timeout_s"}))
    return c.client.submit(spec)


@pytest.mark.skipif(len(FLEET) < 3, reason="gangs overlap in every way only on 3 or more ranks")
def test_gangs_that_change_shape_never_hang_and_keep_their_bandwidth(tmp_path):
    c = Cluster(tmp_path)
    try:
        c.start_coordinator()
        ids = start_fleet(c)
        n = len(ids)
        reference = {}
        for size in sorted({len(g) for step in _gangs(n) for g in step}, reverse=True):
            done = c.wait_job(_submit(c, ids, list(range(size))).id, timeout=600)
            assert done.state == pb.SUCCEEDED, (size, done.reason)
            reference[size] = done.results[0]
        print("reference at %d MiB: %s" % (SIZE >> 20, {k: f"{r.busbw_gbps:.1f} GB/s, {r.time_us:.0f} us"
                                                        for k, r in reference.items()}))
        jobs = 0
        for step in _gangs(n):
            t0 = time.monotonic()
            submitted = [(gang, _submit(c, ids, gang)) for gang in step]
            for gang, job in submitted:
                done = c.wait_job(job.id, timeout=600)
                jobs += 1
                assert done.state == pb.SUCCEEDED, (gang, done.reason)
                r = done.results[0]
                # By time, the same as by busbw for one op, size and world size (busbw of 1 rank is 0).
                ratio = reference[len(gang)].time_us / r.time_us
                print(f"gang {gang}{' (side by side)' if len(step) > 1 else ''}: {r.busbw_gbps:.1f} GB/s, "
                      f"{ratio:.3f} of fresh, warm={done.warm_start}, wrong={r.wrong}, "
                      f"{time.monotonic() - t0:.2f} s")
                assert r.wrong == 0
                # Ranks sharing one GPU over sockets: no bandwidth to hold them to. One rank: the op is a
                # local no-op of ~5 us (busbw 0), whose time is noise (5.4 fresh against 7.8 us measured
                # on 4 x H200), not a bandwidth a gang keeps or loses.
                if not SHARED and len(gang) > 1:
                    assert ratio >= TOLERANCE, (gang, r.time_us, reference[len(gang)].time_us)
        assert jobs >= 20
    finally:
        c.close()
