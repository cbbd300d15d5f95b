"""The NCCL path on real GPUs: every op, several dtypes and reduce ops, warm groups, failure."""

import os
import subprocess
import time

import pytest
from fleet import restart

from ringleader import spec as specs
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("op", [o for o in specs.OPS])
@pytest.mark.parametrize("dtype,reduce_op", [("float32", "sum"), ("bfloat16", "avg"), ("int8", "max"),
                                             ("float16", "prod"), ("int64", "min")])
def test_every_op_on_nccl(gpu_cluster, op, dtype, reduce_op):
    job = gpu_cluster.submit(op=op, dtype=dtype, reduce_op=reduce_op, sizes=[8, 1 << 20, 64 << 20],
                             iters=5, warmup=2, root=1 if op in specs.ROOTED_OPS else 0)
    done = gpu_cluster.wait_job(job.id, timeout=300)
    assert done.state == pb.SUCCEEDED, done.reason
    assert done.backend == "nccl"
    assert all(r.wrong == 0 for r in done.results), [r.wrong for r in done.results]


def test_warm_group_starts_fast(gpu_cluster):
    spec = dict(op="all_reduce", sizes=[8], iters=1, warmup=0)
    first = gpu_cluster.wait_job(gpu_cluster.submit(**spec).id)
    t0 = time.perf_counter()
    second = gpu_cluster.wait_job(gpu_cluster.submit(**spec).id)
    elapsed = time.perf_counter() - t0
    assert first.state == second.state == pb.SUCCEEDED
    assert second.warm_start
    print(f"warm trivial job, submit to SUCCEEDED: {elapsed * 1e3:.1f} ms")


def test_too_large_for_the_gpu_is_rejected_with_numbers(gpu_cluster):
    import grpc

    with pytest.raises(grpc.RpcError) as err:
        gpu_cluster.client.submit(pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(
            op="all_gather", sizes=[512 << 30])))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "GiB per device" in err.value.details()


def test_worker_killed_mid_job_fails_naming_rank_and_survivor_recovers(gpu_cluster):
    c = gpu_cluster
    job = c.submit(workers=["g0", "g1"], op="all_reduce", sizes=[256 << 20], iters=100000, warmup=0)
    done, elapsed = c.kill_during(job.id, "g1", settle_s=3)
    assert elapsed < 10
    assert done.state == pb.FAILED
    assert "rank 1 (worker g1)" in done.reason, done.reason
    c.wait_idle(["g0"], timeout=120)  # its executor, hung in NCCL, was replaced
    restart(c, "g1")  # as an operator would: same id, same --state-dir, so it is let back in
    c.wait_idle(["g0", "g1"], timeout=180)
    nxt = c.wait_job(c.submit(workers=["g0", "g1"], op="all_reduce", sizes=[1 << 20]).id, timeout=300)
    assert nxt.state == pb.SUCCEEDED, nxt.reason


@pytest.mark.parametrize("mode", ["blocking", "async"])
def test_p2p_on_nccl(gpu_cluster, mode):
    done = gpu_cluster.wait_job(gpu_cluster.client.submit(pb.JobSpec(
        world_size=2, p2p=pb.P2PSpec(sizes=[8, 64 << 20], iters=10, mode=mode))).id, timeout=300)
    assert done.state == pb.SUCCEEDED, done.reason
    assert all(r.wrong == 0 for r in done.p2p.rows)


def test_gradient_average_and_train_on_nccl(gpu_cluster):
    g = gpu_cluster.wait_job(gpu_cluster.client.submit(pb.JobSpec(
        world_size=2, gradient_average=pb.GradientAverageSpec(size_bytes=64 << 20, iters=5))).id, timeout=300)
    assert g.state == pb.SUCCEEDED, g.reason
    assert g.gradient_average.device_ok and g.gradient_average.host_ok
    t = gpu_cluster.wait_job(gpu_cluster.client.submit(pb.JobSpec(
        world_size=2, train=pb.TrainSpec(model="mlp", steps=30, batch_size=64))).id, timeout=300)
    assert t.state == pb.SUCCEEDED, t.reason
    assert t.train.param_max_abs_diff == 0.0 and t.train.loss[-1] < t.train.loss[0]


def test_worker_metrics_read_nvml_on_gpu(gpu_cluster):
    """A daemon on a real GPU exports device memory and utilisation through NVML."""
    import urllib.request

    from ports import free_port

    port = free_port("127.0.0.1")
    gpu_cluster.start_worker("m0", device="cuda:0", metrics_address=f"127.0.0.1:{port}")
    gpu_cluster.wait_idle(["m0"], timeout=300)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values = {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
              if line.startswith("ringleader_worker_") and not line.startswith("#")}
    assert values["ringleader_worker_device_memory_total_bytes"] > 40e9  # H100 80 GB, H200 141 GB
    assert values["ringleader_worker_device_memory_used_bytes"] > 0
    assert 0 <= values["ringleader_worker_gpu_utilization_ratio"] <= 1
    # dcgm-exporter's join labels: the GPU's UUID and host index as nvidia-smi reports them.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    smi = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader", "-i", visible],
                         capture_output=True, text=True, check=True).stdout.strip()
    index, uuid = [x.strip() for x in smi.split(",")]
    busy = next(line for line in body.splitlines() if line.startswith("ringleader_worker_busy{"))
    assert f'UUID="{uuid}"' in busy and f'gpu="{index}"' in busy, (busy, smi)
    # The probes: alive, and ready once registered.
    for path in ("/healthz", "/readyz"):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            assert r.status == 200, path
    gpu_cluster.kill_worker("m0")
