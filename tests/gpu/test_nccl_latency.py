"""Small-message latency on real GPUs (NCCL): CUDA-graph mode for every capturable op, calibrated eager loops,
gather/scatter on one buffer, symmetric-memory all_reduce, pinned NCCL algorithms on groups of
their own flavor, the algo sweep, and whether NCCL re-reads NCCL_ALGO/NCCL_PROTO for a new
communicator (what the algo sweep's variant groups rely on).

    python3 -m pytest tests/gpu/test_nccl_latency.py -q -s      (scripts/gpu-check.sh latency)
"""

import datetime
import glob
import json
import multiprocessing
import os
import traceback

import pytest

from fleet import GPUS, SHARED
from ports import free_port

from ringleader import algos, spec
from ringleader.v1 import jobs_pb2 as pb

# Symmetric memory needs a GPU per rank; so do the sweep (it includes it) and the env probe.
needs_a_gpu_per_rank = pytest.mark.skipif(bool(SHARED) or GPUS < 2, reason="needs 2 CUDA GPUs, one per rank")

pytestmark = pytest.mark.gpu

SIZES = [8, 4096, 1 << 20, 64 << 20]


def _show(job: pb.Job) -> None:
    for r in job.results:
        print(f"  {r.op:>14} {r.algo:>14} {r.mode:>5} {r.size_bytes:>10} B {r.time_us:9.2f} us "
              f"p50 {r.time_p50_us:8.2f} p99 {r.time_p99_us:8.2f} iters {r.iters:>5} wrong {r.wrong}")


def _ok(cluster, timeout=600, **collective) -> pb.Job:
    collective.setdefault("iters", spec.AUTO_ITERS)  # the cluster helper would default to 3
    done = cluster.wait_job(cluster.submit(**collective).id, timeout=timeout)
    assert done.state == pb.SUCCEEDED, done.reason
    assert all(r.wrong == 0 for r in done.results), [(r.size_bytes, r.wrong) for r in done.results]
    _show(done)
    return done


@pytest.mark.parametrize("op", [o for o in spec.OPS if o != "barrier"])
def test_graph_mode_runs_and_checks_every_capturable_op(gpu_cluster, op):
    root = 1 if op in spec.ROOTED_OPS else 0
    done = _ok(gpu_cluster, op=op, sizes=SIZES, graph=True, root=root)
    assert all(r.mode == "graph" and r.algo == "nccl" for r in done.results)
    assert all(r.iters >= 20 for r in done.results)
    if op in spec.REDUCING_OPS:
        _ok(gpu_cluster, op=op, dtype="bfloat16", reduce_op="avg", sizes=[8, 1 << 20], graph=True, iters=40)


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("op", ["gather", "scatter"])
def test_gather_and_scatter_on_one_buffer(gpu_cluster, op, in_place):
    for root in (0, 1):
        _ok(gpu_cluster, op=op, sizes=[8, 1 << 20, 256 << 20], root=root, in_place=in_place, iters=5)


def test_eager_rows_carry_per_iteration_p99_and_max(gpu_cluster):
    # nccl-tests 2.19 -I prints both per size; the mean still comes from the loop without
    # per-iteration events (worker/distutil.time_loop), so it can sit below min at 8 B.
    done = _ok(gpu_cluster, op="all_reduce", sizes=[8, 1 << 20], iters=200)
    for r in done.results:
        assert 0 < r.time_min_us <= r.time_p50_us <= r.time_p99_us <= r.time_max_us, r


def test_auto_iterations_are_calibrated_per_size(gpu_cluster):
    done = _ok(gpu_cluster, op="all_reduce", sizes=[8, 1 << 30])
    small, large = done.results
    assert small.mode == "eager" and small.iters >= 20
    if not SHARED:  # over the shared fleet's sockets an 8 B op takes milliseconds
        assert small.iters > 20, small.iters  # ~20 ms of 8 B ops: hundreds
    assert small.iters * small.time_us > 5_000, "the timed loop should last about 20 ms"
    assert large.iters == 20  # a 1 GiB op is long: nccl-tests' count


@needs_a_gpu_per_rank
@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("algo", algos.SYMM_ALGOS)
def test_symmetric_memory_all_reduce(gpu_cluster, algo, dtype, graph):
    done = _ok(gpu_cluster, op="all_reduce", dtype=dtype, sizes=SIZES, algo=algo, graph=graph)
    assert all(r.algo == algo for r in done.results)


def test_pinned_nccl_algorithm_gets_a_group_of_its_flavor(gpu_cluster):
    _ok(gpu_cluster, op="all_reduce", sizes=[8])
    pinned = _ok(gpu_cluster, op="all_reduce", sizes=[8, 1 << 20], algo="nccl:ring/ll")
    assert not pinned.warm_start, "a default-flavor warm group must not serve NCCL_PROTO=LL"
    again = _ok(gpu_cluster, op="all_reduce", sizes=[8], algo="nccl:ring/ll")
    assert again.warm_start
    tree = _ok(gpu_cluster, op="all_reduce", sizes=[8, 1 << 20], algo="nccl:tree/simple", graph=True)
    assert not tree.warm_start
    back = _ok(gpu_cluster, op="all_gather", sizes=[1 << 20])
    assert not back.warm_start


@needs_a_gpu_per_rank
def test_algo_sweep_finds_a_winner_per_size(gpu_cluster):
    job = gpu_cluster.client.submit(pb.JobSpec(world_size=2, op_timeout_s=600, algo_sweep=pb.AlgoSweepSpec(
        sizes=[8, 1024, 65536, 1 << 20, 16 << 20], graph=True)))
    done = gpu_cluster.wait_job(job.id, timeout=900)
    assert done.state == pb.SUCCEEDED, done.reason
    r = done.algo_sweep
    from ringleader_app.table import algo_sweep_table

    print(algo_sweep_table(r))
    assert list(r.algos) == algos.default_algos("nccl"), "every algo ran (symmetric memory included)"
    assert all(x.wrong == 0 and x.mode == "graph" for x in r.results)
    assert [b.size_bytes for b in r.best] == [8, 1024, 65536, 1 << 20, 16 << 20]
    assert r.table and r.table[-1].max_bytes == 0


# ---- does NCCL read NCCL_ALGO/NCCL_PROTO again for a communicator made by new_group? ---------

def _env_probe_main(rank: int, n: int, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from worker.algos import variant_group

    result: dict = {}
    try:
        # NCCL reads NCCL_DEBUG* once per process, at its first use: set before anything.
        os.environ.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="ENV,INIT,TUNING",
                          NCCL_DEBUG_FILE=os.path.join(out, f"nccl.{rank}.%p.log"))
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n,
                                device_id=device, timeout=datetime.timedelta(seconds=120))
        x = torch.ones(2, device=device)
        for algo in ("nccl:ring/ll", "nccl:tree/simple"):
            with variant_group(algo, device) as group:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    for _ in range(20):
                        dist.all_reduce(x, group=group)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(50):
                    graph.replay()
                end.record()
                end.synchronize()
                result[algo] = start.elapsed_time(end) * 1e3 / 1000
                graph.reset()
        result["env_after"] = {k: os.environ.get(k) for k in ("NCCL_ALGO", "NCCL_PROTO")}
        dist.destroy_process_group()
    except BaseException:
        result["traceback"] = traceback.format_exc()
    with open(os.path.join(out, f"result.{rank}.json"), "w") as f:
        json.dump(result, f)


@needs_a_gpu_per_rank
def test_nccl_reads_algo_and_proto_again_for_a_new_group(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    port = free_port("127.0.0.1")
    procs = [ctx.Process(target=_env_probe_main, args=(r, 2, port, str(tmp_path))) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    results = [json.loads((tmp_path / f"result.{r}.json").read_text()) for r in range(2)]
    assert all("traceback" not in r for r in results), results
    print("8 B all_reduce in graph mode per variant group (us):", {k: v for k, v in results[0].items() if ":" in k})
    assert results[0]["env_after"] == {"NCCL_ALGO": None, "NCCL_PROTO": None}, "comm_env restores the environment"
    log = "".join(open(f).read() for f in glob.glob(str(tmp_path / "nccl.0.*.log")))
    for line in ("NCCL_ALGO set by environment to Ring", "NCCL_PROTO set by environment to LL",
                 "NCCL_ALGO set by environment to Tree", "NCCL_PROTO set by environment to Simple"):
        assert line in log, (f"NCCL did not log {line!r} when new_group made a communicator: either it does "
                             "not re-read the variable (then the algo sweep must run each variant on a group "
                             "of its own flavor, as collective jobs do) or its log wording changed; see the "
                             f"log under {tmp_path}")
