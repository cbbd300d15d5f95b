"""p2p, gradient_average and train jobs end to end: real coordinator and workers, gloo on CPU;
and every kind of the table (ringleader/kinds.py) listed by gRPC, REST and the CLI alike."""

import json
import subprocess

import grpc
import httpx
import pytest

from cluster import ringleader_cmd, running
from ringleader import kinds
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration


def _run(cluster, spec: pb.JobSpec, timeout=180) -> pb.Job:
    job = cluster.client.submit(spec)
    done = cluster.wait_job(job.id, timeout=timeout)
    assert done.state == pb.SUCCEEDED, done.reason
    return done


@pytest.mark.parametrize("mode", ["blocking", "async"])
def test_p2p_ping_pong(cluster, mode):
    done = _run(cluster, pb.JobSpec(world_size=2, p2p=pb.P2PSpec(sizes=[8, 1 << 20], iters=5, mode=mode)))
    rows = done.p2p.rows
    assert [(r.src, r.dst, r.size_bytes) for r in rows] == [(0, 1, 8), (0, 1, 1 << 20)]
    for r in rows:
        assert r.wrong == 0 and r.mode == mode and r.latency_us > 0
        assert r.bandwidth_gbps == pytest.approx(r.size_bytes / r.latency_us / 1e3, rel=1e-6)
    assert not done.p2p.matrix


def test_p2p_pairwise_matrix(cluster):
    done = _run(cluster, pb.JobSpec(world_size=3, p2p=pb.P2PSpec(sizes=[64 << 10], iters=3, pairwise=True)))
    r = done.p2p
    assert len(r.rows) == 6 and all(x.wrong == 0 for x in r.rows)
    assert r.matrix_size_bytes == 64 << 10
    assert [len(row.gbps) for row in r.matrix] == [3, 3, 3]
    assert all(r.matrix[i].gbps[i] == -1 for i in range(3))
    assert all(r.matrix[i].gbps[j] > 0 for i in range(3) for j in range(3) if i != j)
    assert r.median_gbps > 0


def test_gradient_average(cluster):
    done = _run(cluster, pb.JobSpec(world_size=2, gradient_average=pb.GradientAverageSpec(size_bytes=1 << 20, iters=3)))
    g = done.gradient_average
    assert g.device_ok and g.host_ok and g.max_rel_error < 1e-5
    assert g.numel == (1 << 20) // 4 and g.world_size == 2
    assert g.device_time_us > 0 and g.host_time_us > 0
    assert g.speedup == pytest.approx(g.host_time_us / g.device_time_us, rel=1e-6)


@pytest.mark.parametrize("model", ["linear", "mlp"])
def test_train(cluster, model):
    done = _run(cluster, pb.JobSpec(world_size=2, train=pb.TrainSpec(model=model, steps=20, batch_size=32, lr=0.05)))
    t = done.train
    assert t.model == model and len(t.loss) == 20 and t.loss[-1] < t.loss[0]
    assert t.param_max_abs_diff == 0.0
    assert t.samples_per_s > 0 and t.comm_ms > 0 and 0 < t.comm_share < 1


def test_cli_train_wait_prints_summary(cluster):
    p = subprocess.run(ringleader_cmd("--coordinator", cluster.address, "submit", "--kind", "train", "-n", "2",
                                      "--model", "linear", "--steps", "5", "--wait"),
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    assert "replicas agree:  max |param difference| across ranks = 0" in p.stdout
    assert "samples/s" in p.stdout


def test_cli_pairwise_grid(cluster):
    p = subprocess.run(ringleader_cmd("--coordinator", cluster.address, "submit", "--kind", "p2p", "--pairwise",
                                      "-n", "2", "--sizes", "4K", "--iters", "3", "--wait"),
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    assert "# bandwidth matrix at 4KB" in p.stdout


def test_bad_parameters_name_the_field(cluster):
    import grpc

    for spec, field in [(pb.JobSpec(world_size=1, p2p=pb.P2PSpec(pairwise=True)), "p2p.pairwise"),
                        (pb.JobSpec(world_size=2, train=pb.TrainSpec(batch_size=0)), "train.batch_size"),
                        (pb.JobSpec(world_size=2, train=pb.TrainSpec(model="gpt")), "train.model")]:
        with pytest.raises(grpc.RpcError) as err:
            cluster.client.submit(spec)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith(field + ":")


def _queued_spec(name: str) -> pb.JobSpec:
    """A job listed as `name` (an op or a kind) that stays QUEUED: no worker is on its host."""
    spec = pb.JobSpec(world_size=2, placement=pb.Placement(host="nowhere.invalid"))
    kind = next(k for k in kinds.TABLE if name in k.listed_as)
    if kind.name == "collective":
        spec.collective.op = name
    else:
        getattr(spec, kind.name).SetInParent()
    return spec


def test_every_listed_name_filters_alike_over_grpc_rest_and_the_cli(tmp_path):
    with running(tmp_path, [], http=True) as c:
        ids = {name: c.client.submit(_queued_spec(name)).id for name in kinds.listed_names()}
        with httpx.Client(base_url=c.http_url, timeout=30) as rest:
            assert [n for k in rest.get("/api/v1/kinds").json()["kinds"] for n in k["listed_as"]] == list(ids)
            for name, job_id in ids.items():
                assert [j.id for j in c.client.list(op=name).jobs] == [job_id], name
                r = rest.get("/api/v1/jobs", params={"op": name})
                assert r.status_code == 200 and [j["id"] for j in r.json()["jobs"]] == [job_id], (name, r.text)
            assert rest.get("/api/v1/jobs", params={"op": "collective"}).status_code == 422
        with pytest.raises(grpc.RpcError) as err:  # gRPC refuses what REST refuses
            c.client.list(op="collective")
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "op" in err.value.details()
        p = subprocess.run(ringleader_cmd("--coordinator", c.address, "jobs", "--op", "algo_sweep", "-o", "json"),
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert [j["id"] for j in json.loads(p.stdout)["jobs"]] == [ids["algo_sweep"]]
