"""NCCL across hosts made of network namespaces, on one GPU machine (one GPU is enough).

Workers g1 and g2 run in namespaces h1 and h2, each with its own NCCL_HOSTID, so NCCL takes them
for two hosts: no shared memory or P2P between them, no "duplicate GPU" refusal when both use
GPU 0, and its socket transport over the veth, on the interface each worker advertises
(NCCL_SOCKET_IFNAME, set by worker/netif.py). InfiniBand and network plugins are kept out
(NCCL_NET=Socket, NCCL_IB_DISABLE=1) so the bridge is the only path. Skipped where there is no CUDA device; on the GPU machine run
`scripts/gpu-check.sh multihost`.
"""

from __future__ import annotations

import pytest

from hostcluster import MODES, TIMINGS, bed_cluster, cut_off_mid_job
from ringleader_app.demo import visible_gpu_count
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.multihost

WORKERS = {"g1": "h1", "g2": "h2"}


@pytest.fixture(scope="module", params=MODES)
def nccl_hosts(request, tmp_path_factory):
    gpus = visible_gpu_count()
    if gpus < 1:
        pytest.skip("needs a CUDA GPU and NCCL (scripts/gpu-check.sh multihost on the GPU machine)")
    # Two workers share GPU 0 on a one-GPU machine; with more, each has its own.
    devices = {wid: f"cuda:{i % gpus}" for i, wid in enumerate(WORKERS)}
    env = {wid: {"NCCL_HOSTID": f"ringleader-{host}", "NCCL_NET": "Socket", "NCCL_IB_DISABLE": "1",
                 "NCCL_NVLS_ENABLE": "0"} for wid, host in WORKERS.items()}
    with bed_cluster(tmp_path_factory.mktemp(f"nccl-{request.param.replace('+', '-')}"), request.param, WORKERS,
                     device_of=devices.get, env_of=env.get) as (bed, c):
        yield request.param, bed, c


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "broadcast", "sendrecv"])
def test_nccl_jobs_across_hosts(nccl_hosts, op):
    mode, bed, c = nccl_hosts
    job = c.wait_job(c.submit(world_size=2, workers=list(WORKERS), op=op, sizes=[8, 1 << 20, 64 << 20],
                              iters=5, warmup=2).id, timeout=300)
    assert job.state == pb.SUCCEEDED, job.reason
    assert job.backend == "nccl"
    assert [r.wrong for r in job.results] == [0, 0, 0]
    assert sorted(w.host for w in job.workers) == ["h1", "h2"]
    largest = job.results[-1]
    TIMINGS.append(f"nccl, {mode}: {op} 64 MiB over the bridge: busbw {largest.busbw_gbps:.2f} GB/s, "
                   f"{largest.time_us:.0f} us")


def test_a_host_cut_off_mid_nccl_job_fails_it_then_comes_back(nccl_hosts):
    mode, bed, c = nccl_hosts
    fail_s, reconnect_s = cut_off_mid_job(c, bed, WORKERS, victim="g2", sizes=[16 << 20])
    TIMINGS.append(f"nccl, 2 ranks, {mode}: job failed {fail_s:.1f} s after the cable was pulled; "
                   f"worker back {reconnect_s:.1f} s after it was plugged in")
