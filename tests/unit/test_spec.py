"""Sizes, bandwidth factors and spec validation (no servers)."""

import pytest

from ringleader import jobspec
from ringleader import spec as specs
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb


@pytest.mark.parametrize("text,expected", [("8", 8), ("1K", 1024), ("64M", 64 << 20), ("8G", 8 << 30),
                                           ("2k", 2048), ("1MiB", 1 << 20), ("1.5K", 1536)])
def test_parse_size_binary_suffixes(text, expected):
    assert specs.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "-1", "1.3", "1X"])
def test_parse_size_rejects_garbage(text):
    with pytest.raises(InvalidSpec) as err:
        specs.parse_size(text, "max_bytes")
    assert err.value.field == "max_bytes"


@pytest.mark.parametrize("op,n,factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_gather", 4, 0.75), ("reduce_scatter", 2, 0.5),
    ("alltoall", 8, 0.875), ("gather", 4, 0.75), ("scatter", 2, 0.5), ("broadcast", 8, 1.0),
    ("reduce", 8, 1.0), ("sendrecv", 2, 1.0), ("barrier", 2, 0.0),
])
def test_busbw_factor_matches_nccl_tests(op, n, factor):
    assert specs.busbw_factor(op, n) == pytest.approx(factor)


def test_effective_size_rounds_to_whole_chunks():
    assert specs.effective_size("all_reduce", 10, "float32", 2) == 8
    assert specs.effective_size("all_gather", 8, "float32", 4) == 16  # at least one element per rank
    assert specs.effective_size("alltoall", 100, "float64", 3) == 96
    assert specs.effective_size("barrier", 1 << 20, "float32", 3) == 0


def test_sweep_sizes_geometric():
    assert specs.sweep_sizes(8, 64, 2) == [8, 16, 32, 64]
    assert specs.sweep_sizes(1 << 20, 1 << 20, 1) == [1 << 20]


def test_bytes_needed_counts_buffers_and_check():
    # all_gather 1 GiB on 8 ranks out-of-place: 1 GiB output + 128 MiB input + 1 GiB check reserve
    assert specs.bytes_needed("all_gather", 1 << 30, 8, False) == (1 << 30) + (1 << 27) + (1 << 30)
    # torch's all_reduce is always in place; alltoall never is
    assert specs.bytes_needed("all_reduce", 1 << 30, 2, False) == 2 << 30
    assert specs.bytes_needed("alltoall", 1 << 30, 2, True) == 3 << 30


def _spec(**kw):
    coll = {k: kw.pop(k) for k in list(kw) if k in pb.CollectiveSpec.DESCRIPTOR.fields_by_name}
    coll.setdefault("op", "all_reduce")
    return pb.JobSpec(world_size=kw.pop("world_size", 2), collective=pb.CollectiveSpec(**coll), **kw)


@pytest.mark.parametrize("kw,field", [
    (dict(op="allreduce"), "collective.op"),
    (dict(dtype="float8"), "collective.dtype"),
    (dict(reduce_op="xor"), "collective.reduce_op"),
    (dict(world_size=0), "world_size"),
    (dict(op="broadcast", root=2), "collective.root"),
    (dict(min_bytes=64, max_bytes=8), "collective.max_bytes"),
    (dict(factor=0.5), "collective.factor"),
    (dict(op="sendrecv", world_size=1), "world_size"),
    (dict(placement=pb.Placement(worker_ids=["a"])), "placement.worker_ids"),
    (dict(placement=pb.Placement(device_type="tpu")), "placement.device_type"),
    (dict(op_timeout_s=-1), "op_timeout_s"),
    (dict(world_size=65_537), "world_size"),
    (dict(name="x" * 257), "name"),
    (dict(placement=pb.Placement(host="h" * 257)), "placement.host"),
    (dict(placement=pb.Placement(gpu_model="g" * 257)), "placement.gpu_model"),
    (dict(world_size=1, placement=pb.Placement(worker_ids=["w" * 257])), "placement.worker_ids"),
    (dict(world_size=10**9), "world_size"),
    (dict(name="x" * (3 << 20)), "name"),
    (dict(world_size=8000, placement=pb.Placement(worker_ids=[f"worker-{i:05}" for i in range(8000)])),
     "placement.worker_ids"),  # 8000 ids of 12 characters: over the spec's 64 KiB
    (dict(priority=1001), "priority"),
    (dict(priority=-1001), "priority"),
    (dict(op_timeout_s=7 * 86400 + 1), "op_timeout_s"),
    (dict(op_timeout_s=float("inf")), "op_timeout_s"),
    (dict(sizes=[(1 << 40) + 1]), "collective.sizes"),
    (dict(max_bytes=(1 << 40) + 1), "collective.max_bytes"),
    (dict(sizes=list(range(1, 66))), "collective.sizes"),
    (dict(iters=100_001), "collective.iters"),
])
def test_invalid_specs_name_the_field(kw, field):
    with pytest.raises(InvalidSpec) as err:
        jobspec.normalize(_spec(**kw))
    assert err.value.field == field
    assert str(err.value).startswith(field + ":")


def test_missing_kind_is_invalid():
    with pytest.raises(InvalidSpec) as err:
        jobspec.normalize(pb.JobSpec(world_size=2))
    assert err.value.field == "kind"


def test_normalize_fills_defaults():
    s = jobspec.normalize(_spec()).spec
    c = s.collective
    assert (c.dtype, c.reduce_op, c.iters, c.warmup) == ("float32", "sum", 0, 5)  # iters 0: auto
    assert (c.min_bytes, c.max_bytes, c.factor) == (8, 64 << 20, 2.0)
    assert s.op_timeout_s == specs.DEFAULT_OP_TIMEOUT_S


def test_zero_warmup_is_kept():
    assert jobspec.normalize(_spec(warmup=0)).spec.collective.warmup == 0


def test_backend_refusal_rejects_integer_avg_on_gloo_only():
    job = jobspec.normalize(_spec(reduce_op="avg", dtype="int32"))
    assert str(job.refusal("gloo")) == "collective.reduce_op: avg on int32 is not supported by the gloo backend"
    assert job.refusal("nccl") is None and not job.runs_on("gloo") and job.runs_on("nccl")
    assert jobspec.normalize(_spec(reduce_op="avg", dtype="float32")).runs_on("gloo")


def test_valid_job_carries_what_later_steps_need():
    job = jobspec.normalize(_spec(op="all_gather", world_size=4, sizes=[10, 16, 1 << 20]))
    assert job.kind == "collective" and job.op == "all_gather"
    assert job.sizes == (16, 1 << 20)  # rounded to whole chunks of 4 ranks, duplicates dropped
    assert job.progress_total == 2
    assert job.needs_bytes == specs.bytes_needed("all_gather", 1 << 20, 4, False)


def test_small_factor_still_progresses():
    sizes = specs.sweep_sizes(8, 64, 1.1)
    assert sizes == sorted(set(sizes)) and sizes[-1] <= 64 and len(sizes) > 4


@pytest.mark.parametrize("spec,field", [
    (pb.JobSpec(world_size=1, p2p=pb.P2PSpec(pairwise=True)), "p2p.pairwise"),
    (pb.JobSpec(world_size=1, p2p=pb.P2PSpec()), "world_size"),
    (pb.JobSpec(world_size=2, p2p=pb.P2PSpec(mode="rdma")), "p2p.mode"),
    (pb.JobSpec(world_size=2, p2p=pb.P2PSpec(min_bytes=64, max_bytes=8)), "p2p.max_bytes"),
    (pb.JobSpec(world_size=2, gradient_average=pb.GradientAverageSpec(size_bytes=6)), "gradient_average.size_bytes"),
    (pb.JobSpec(world_size=2, train=pb.TrainSpec(batch_size=0)), "train.batch_size"),
    (pb.JobSpec(world_size=2, train=pb.TrainSpec(model="resnet")), "train.model"),
    (pb.JobSpec(world_size=2, train=pb.TrainSpec(steps=0)), "train.steps"),
    (pb.JobSpec(world_size=2, train=pb.TrainSpec(lr=-1)), "train.lr"),
    (pb.JobSpec(world_size=2, train=pb.TrainSpec(batch_size=(1 << 20) + 1)), "train.batch_size"),
    (pb.JobSpec(world_size=2, train=pb.TrainSpec(steps=100_001)), "train.steps"),
    (pb.JobSpec(world_size=2, gradient_average=pb.GradientAverageSpec(size_bytes=(1 << 40) + 4)),
     "gradient_average.size_bytes"),
    # 128 ranks pairwise over 2 sizes: 32,512 rows in one report, over the message budget.
    (pb.JobSpec(world_size=128, p2p=pb.P2PSpec(sizes=[8, 1024], pairwise=True)), "p2p.pairwise"),
])
def test_other_kinds_name_the_bad_field(spec, field):
    with pytest.raises(InvalidSpec) as err:
        jobspec.normalize(spec)
    assert err.value.field == field


def test_bounds_admit_their_limits():
    names = [f"w{i:05}" for i in range(4000)]  # about 32 KiB of worker ids: under the spec limit
    big = jobspec.normalize(_spec(world_size=4000, priority=1000, name="x" * 256, op_timeout_s=7 * 86400,
                                  placement=pb.Placement(worker_ids=names), sizes=[1 << 40]))
    assert big.spec.priority == 1000 and len(big.spec.placement.worker_ids) == 4000
    assert jobspec.normalize(_spec(world_size=65_536, priority=-1000)).world_size == 65_536
    jobspec.normalize(pb.JobSpec(world_size=16, p2p=pb.P2PSpec(sizes=[8] * 1 + [1024], pairwise=True)))
    jobspec.check_request_id("r" * 128)
    for bad in ("r" * 129, "tab\there"):
        with pytest.raises(InvalidSpec) as err:
            jobspec.check_request_id(bad)
        assert err.value.field == "request_id"


def test_other_kinds_defaults_and_progress():
    t = jobspec.normalize(pb.JobSpec(world_size=2, train=pb.TrainSpec()))
    ts = t.spec.train
    assert (ts.model, ts.steps, ts.batch_size, ts.lr) == ("linear", 50, 64, 0.05)
    assert t.progress_total == 50 and t.op == "train" and jobspec.op_name(t.spec) == "train"
    g = jobspec.normalize(pb.JobSpec(world_size=2, gradient_average=pb.GradientAverageSpec()))
    assert g.spec.gradient_average.size_bytes == 64 << 20 and g.needs_bytes == 128 << 20
    p = jobspec.normalize(pb.JobSpec(world_size=3, p2p=pb.P2PSpec(sizes=[8, 1024], pairwise=True)))
    assert p.spec.p2p.mode == "blocking" and p.pairs == ((0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1))
    assert p.progress_total == 12 and p.needs_bytes == 2048
