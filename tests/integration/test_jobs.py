"""Collective jobs end to end: real coordinator, real worker daemons and executors, gloo on CPU."""

import subprocess

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cluster import ringleader_cmd
from ringleader import spec as specs
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration

# (op, dtype, reduce_op, in_place): every op, several dtypes and reduce ops.
CASES = [
    ("all_reduce", "float32", "sum", False), ("all_reduce", "int32", "prod", False),
    ("all_reduce", "float64", "min", False), ("all_reduce", "int8", "max", True),
    ("all_reduce", "bfloat16", "avg", False), ("reduce_scatter", "float16", "sum", False),
    ("reduce", "float32", "sum", False), ("reduce", "int64", "max", False),
    ("broadcast", "uint8", "sum", False), ("broadcast", "float64", "sum", False),
    ("all_gather", "float32", "sum", False), ("all_gather", "int32", "sum", True),
    ("reduce_scatter", "float32", "sum", False), ("reduce_scatter", "int64", "min", True),
    ("alltoall", "float32", "sum", False), ("alltoall", "int8", "sum", False),
    ("gather", "float32", "sum", False), ("gather", "int32", "sum", True),
    ("scatter", "float64", "sum", False), ("scatter", "uint8", "sum", True),
    ("sendrecv", "float32", "sum", False), ("sendrecv", "int64", "sum", False),
    ("barrier", "float32", "sum", False),
]


def test_every_op_is_correct(cluster):
    # Submit everything at once: the scheduler runs two 2-rank jobs side by side on the four workers.
    jobs = {case: cluster.submit(op=case[0], dtype=case[1], reduce_op=case[2], in_place=case[3],
                                 root=1 if case[0] in specs.ROOTED_OPS else 0)
            for case in CASES}
    for case, job in jobs.items():
        done = cluster.wait_job(job.id)
        assert done.state == pb.SUCCEEDED, (case, done.reason)
        op = case[0]
        assert len(done.results) == (1 if op == "barrier" else 2)
        for r in done.results:
            assert r.wrong == 0, (case, r)
            assert (r.op, r.dtype, r.world_size, r.iters) == (op, case[1], 2, 3)
            assert r.time_us > 0 and r.time_min_us <= r.time_p50_us <= r.time_p99_us
            if op != "barrier":
                assert r.count == r.size_bytes // specs.DTYPE_SIZES[case[1]]
                assert r.algbw_gbps == pytest.approx(r.size_bytes / r.time_us / 1e3, rel=1e-6)
                assert r.busbw_gbps == pytest.approx(r.algbw_gbps * specs.busbw_factor(op, 2), rel=1e-6)


def test_three_ranks(cluster):
    job = cluster.submit(world_size=3, op="all_gather", dtype="float32", sizes=[12, 3 * 4096])
    done = cluster.wait_job(job.id)
    assert done.state == pb.SUCCEEDED, done.reason
    assert [r.size_bytes for r in done.results] == [12, 3 * 4096]
    assert all(r.wrong == 0 for r in done.results)
    ranks = [w.rank for w in done.workers]
    assert ranks == [0, 1, 2]


def test_two_jobs_on_disjoint_workers_run_at_once(cluster):
    cluster.wait_idle(["w0", "w1", "w2", "w3"])
    kw = dict(op="all_reduce", sizes=[4 << 20], iters=40, warmup=2)
    a = cluster.submit(workers=["w0", "w1"], **kw)
    b = cluster.submit(workers=["w2", "w3"], **kw)
    a, b = cluster.wait_job(a.id), cluster.wait_job(b.id)
    assert a.state == b.state == pb.SUCCEEDED
    assert {w.worker_id for w in a.workers}.isdisjoint({w.worker_id for w in b.workers})
    assert a.started_at < b.finished_at and b.started_at < a.finished_at, "the jobs did not overlap"


def test_warm_group_is_reused(cluster):
    cluster.wait_idle(["w0", "w1", "w2", "w3"])
    first = cluster.wait_job(cluster.submit(workers=["w1", "w2"], op="all_reduce").id)
    second = cluster.wait_job(cluster.submit(workers=["w1", "w2"], op="broadcast").id)
    assert first.state == second.state == pb.SUCCEEDED
    assert second.warm_start
    assert [w.worker_id for w in second.workers] == ["w1", "w2"]
    assert all(r.wrong == 0 for r in second.results)


def test_job_larger_than_fleet_waits_with_reason_and_can_be_cancelled(cluster):
    job = cluster.submit(world_size=8, op="all_reduce")
    job = cluster.wait_job(job.id, states=(pb.QUEUED,))
    assert job.reason == "needs 8 workers, 4 connected"
    cancelled = cluster.client.cancel(job.id)
    assert cancelled.state == pb.CANCELLED
    with pytest.raises(grpc.RpcError) as err:
        cluster.client.cancel(job.id)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_unknown_job_is_not_found(cluster):
    with pytest.raises(grpc.RpcError) as err:
        cluster.client.get("nope")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_invalid_spec_is_invalid_argument_naming_the_field(cluster):
    with pytest.raises(grpc.RpcError) as err:
        cluster.client.submit(pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="broadcast", root=5)))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("collective.root:")
    with pytest.raises(grpc.RpcError) as err:
        cluster.client.submit(pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(
            op="all_reduce", dtype="int64", reduce_op="avg")))
    assert err.value.details() == "collective.reduce_op: avg on int64 is not supported by the gloo backend"


def test_size_beyond_device_memory_is_rejected_with_numbers(cluster):
    with pytest.raises(grpc.RpcError) as err:
        cluster.client.submit(pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1 << 40])))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("collective.sizes: the largest size needs 2048.0 GiB per device")


@pytest.mark.parametrize("args,field", [
    (["--op", "all_reduce", "--world-size", "0"], "world_size"),
    (["--op", "broadcast", "--world-size", "2", "--root", "3"], "collective.root"),
    (["--op", "all_reduce", "--world-size", "2", "--min-bytes", "1M", "--max-bytes", "1K"], "collective.max_bytes"),
])
def test_cli_bad_spec_is_one_line_exit_2(cluster, args, field):
    p = subprocess.run(ringleader_cmd("--coordinator", cluster.address, "submit", *args),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0
    assert p.stderr.startswith(f"ringleader: error: {field}:")


def test_cli_submit_wait_json(cluster):
    import json

    p = subprocess.run(ringleader_cmd("--coordinator", cluster.address, "submit", "--op", "all_reduce",
                                      "--world-size", "2", "--sizes", "1K,64K", "--iters", "3", "--wait", "--json"),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["state"] == "SUCCEEDED"
    assert [r["size_bytes"] for r in out["results"]] == [1024, 65536]
    assert {"op", "size_bytes", "count", "dtype", "time_us", "algbw_gbps", "busbw_gbps", "wrong"} <= set(out["results"][0])


def test_health_and_reflection(cluster):
    with grpc.insecure_channel(cluster.address) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        status = health.Check(health_pb2.HealthCheckRequest(service="ringleader.v1.JobService"), timeout=5)
        assert status.status == health_pb2.HealthCheckResponse.SERVING
        from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        responses = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        names = {s.name for r in responses for s in r.list_services_response.service}
        assert {"ringleader.v1.JobService", "ringleader.v1.WorkerService", "grpc.health.v1.Health"} <= names


def test_a_trivial_job_submitted_and_watched_in_one_call_ends_with_its_record_complete(cluster):
    """SubmitAndWatchJob, a warm start's path: the acknowledged job first, then its events to
    SUCCEEDED; by then its record holds the one-op row (checked: 0 wrong), and the second job of
    the group says it started warm."""
    cluster.wait_idle(["w0", "w1"])
    spec = pb.JobSpec(world_size=2, placement=pb.Placement(worker_ids=["w0", "w1"]),
                      collective=pb.CollectiveSpec(op="all_reduce", sizes=[8], iters=1, warmup=0))
    for attempt in range(2):
        updates = cluster.client.submit_and_watch(spec)
        accepted = next(updates)
        assert isinstance(accepted, pb.Job) and accepted.id
        events = list(updates)
        assert [e.job_id for e in events] == [accepted.id] * len(events)
        kinds = [e.WhichOneof("event") for e in events]
        assert kinds[-1] == "state" and events[-1].state.state == pb.SUCCEEDED, events
        assert "result" in kinds[:-1], "the row is recorded before the job reads SUCCEEDED"
        job = cluster.client.get(accepted.id)
        assert job.state == pb.SUCCEEDED
        assert [(r.op, r.size_bytes, r.iters, r.wrong, r.world_size) for r in job.results] == [("all_reduce", 8, 1, 0, 2)]
        assert job.results[0].time_us > 0
        if attempt:
            assert job.warm_start
