"""Every limit of the job spec checked at and beside it, field by field, for every kind; and what
the checked spec carries to the later steps (sizes, pairs, memory, progress, defaults written out).
Written against the surviving mutants of `mutmut run` (pyproject.toml [tool.mutmut])."""

from __future__ import annotations

import pytest

from ringleader import algos, jobspec
from ringleader import spec as specs
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb


def ok(**spec) -> jobspec.ValidJob:
    spec.setdefault("world_size", 2)
    return jobspec.normalize(pb.JobSpec(**spec))


def refused(field: str, *words: str, **spec) -> InvalidSpec:
    """The spec is refused naming `field`, with a message that says why (every word in it)."""
    spec.setdefault("world_size", 2)
    with pytest.raises(InvalidSpec) as err:
        jobspec.normalize(pb.JobSpec(**spec))
    assert err.value.field == field, err.value
    for word in words:
        assert word in err.value.message, (word, err.value.message)
    return err.value


def coll(**kw) -> pb.CollectiveSpec:
    kw.setdefault("op", "all_reduce")
    return pb.CollectiveSpec(**kw)


# ---- common fields -------------------------------------------------------------------------------


def test_world_size_and_priority_limits():
    assert ok(world_size=1, collective=coll()).world_size == 1
    assert ok(world_size=jobspec.MAX_WORLD_SIZE, collective=coll()).world_size == jobspec.MAX_WORLD_SIZE
    refused("world_size", "between 1 and 65536", "got 0", world_size=0, collective=coll())
    refused("world_size", "got 65537", world_size=jobspec.MAX_WORLD_SIZE + 1, collective=coll())
    for p in (-jobspec.MAX_PRIORITY, jobspec.MAX_PRIORITY):
        assert ok(priority=p, collective=coll()).spec.priority == p
    for p in (-jobspec.MAX_PRIORITY - 1, jobspec.MAX_PRIORITY + 1):
        refused("priority", "between -1000 and 1000", f"got {p}", priority=p, collective=coll())
    e = refused("kind", "collective, p2p, gradient_average, train, algo_sweep")
    assert e.message.startswith("set a job kind")


def test_text_and_request_id_limits():
    jobspec.check_text("name", "x" * jobspec.MAX_TEXT)
    with pytest.raises(InvalidSpec) as err:
        jobspec.check_text("name", "x" * (jobspec.MAX_TEXT + 1))
    assert err.value.field == "name" and "at most 256 characters, got 257" in err.value.message
    jobspec.check_request_id("r" * jobspec.MAX_REQUEST_ID)
    jobspec.check_request_id("")
    for bad in ("r" * (jobspec.MAX_REQUEST_ID + 1), "tab\there"):
        with pytest.raises(InvalidSpec) as err:
            jobspec.check_request_id(bad)
        assert err.value.field == "request_id" and "printable characters" in err.value.message


def test_timeouts_at_and_beside_their_limits():
    longest = dict(op_timeout_s=jobspec.MAX_OP_TIMEOUT_S)  # the rendezvous deadline stays within it
    for field in ("op_timeout_s", "rendezvous_timeout_s", "queue_timeout_s"):
        at = ok(collective=coll(), **{**longest, field: jobspec.MAX_OP_TIMEOUT_S}).spec
        assert getattr(at, field) == 7 * 86400
        for bad in (-0.001, jobspec.MAX_OP_TIMEOUT_S + 0.001, float("nan"), float("inf")):
            refused(field, "seconds between 0", "604800", collective=coll(), **{**longest, field: bad})
    assert ok(collective=coll()).spec.op_timeout_s == specs.DEFAULT_OP_TIMEOUT_S  # written out
    assert ok(collective=coll(), op_timeout_s=5).spec.op_timeout_s == 5
    assert ok(collective=coll(), queue_timeout_s=0).spec.queue_timeout_s == 0  # 0: wait forever


def test_placement_checks_name_the_field():
    refused("placement.device_type", "must be cuda or cpu", "'tpu'", placement=pb.Placement(device_type="tpu"),
            collective=coll())
    for device_type in ("", "cuda", "cpu"):
        assert ok(placement=pb.Placement(device_type=device_type), collective=coll()).spec.placement.device_type \
            == device_type
    refused("placement.worker_ids", "names 3 workers but world_size is 2",
            placement=pb.Placement(worker_ids=["a", "b", "c"]), collective=coll())
    e = refused("placement.worker_ids", placement=pb.Placement(worker_ids=["a", "a"]), collective=coll())
    assert e.message == "lists a worker twice"  # the duplicate-worker check
    refused("placement.worker_ids", "at most 256", placement=pb.Placement(worker_ids=["a", "b" * 257]),
            collective=coll())
    for field in ("host", "gpu_model"):
        refused(f"placement.{field}", "at most 256", placement=pb.Placement(**{field: "h" * 257}), collective=coll())


def _spec_of_bytes(n: int) -> pb.JobSpec:
    """A valid spec of exactly `n` bytes serialized: worker ids of 200 characters, and a name of
    the length that makes up the rest."""
    ids: list[str] = []
    while True:
        spec = pb.JobSpec(world_size=len(ids) or 1, placement=pb.Placement(worker_ids=ids), collective=coll())
        for length in range(jobspec.MAX_TEXT + 1):
            spec.name = "n" * length
            if spec.ByteSize() >= n:
                break
        if spec.ByteSize() == n:
            return spec
        ids.append(f"{len(ids):06d}".ljust(200 if n - spec.ByteSize() > 600 else 10, "w"))


def test_spec_size_limit_at_and_beside_it():
    spec = _spec_of_bytes(jobspec.MAX_SPEC_BYTES)
    assert jobspec.normalize(spec).world_size == spec.world_size  # exactly at the limit
    spec.name += "x"
    assert spec.ByteSize() == jobspec.MAX_SPEC_BYTES + 1
    with pytest.raises(InvalidSpec) as err:
        jobspec.normalize(spec)
    assert err.value.field == "placement.worker_ids"
    assert f"{jobspec.MAX_SPEC_BYTES + 1} bytes serialized, at most {jobspec.MAX_SPEC_BYTES}" in err.value.message


# ---- collective ----------------------------------------------------------------------------------


def test_collective_carries_its_memory_need_and_in_place():
    n = 4
    out = ok(world_size=n, collective=coll(op="all_gather", sizes=[1 << 20]))
    inp = ok(world_size=n, collective=coll(op="all_gather", sizes=[1 << 20], in_place=True))
    assert out.needs_bytes == (1 << 20) + (1 << 18) + (1 << 20)  # output, input chunk, check
    assert inp.needs_bytes == 2 << 20 and inp.collective.in_place and not out.collective.in_place
    barrier = ok(collective=coll(op="barrier", sizes=[64, 128]))
    assert barrier.needs_bytes == 0 and barrier.sizes == (0,) and barrier.collective.sizes == (0,)
    v = ok(collective=coll(sizes=[8, 64]))
    assert (v.progress_total, v.op, v.kind, v.pairs) == (2, "all_reduce", "collective", ())


def test_collective_carries_the_domain_form_the_runner_reads():
    c = ok(world_size=4, collective=coll(op="broadcast", root=3, iters=7, warmup=0, sizes=[64, 100], dtype="int32",
                                         in_place=True, algo="Gloo")).collective
    assert c == specs.Collective("broadcast", "int32", "sum", (64, 100), 7, 0, True, 3, False, "gloo")
    d = ok(collective=coll()).collective
    assert (d.iters, d.warmup, d.root, d.dtype, d.reduce_op) == (specs.AUTO_ITERS, 5, 0, "float32", "sum")


def test_collective_refusal_names_its_field():
    v = ok(collective=coll(algo="symm:one_shot", sizes=[1024]))
    e = v.refusal("gloo")
    assert e.field == "collective.algo" and "needs the nccl backend, not gloo" in e.message
    assert v.refusal("nccl") is None and v.runs_on("nccl") and not v.runs_on("gloo")
    assert ok(collective=coll(algo="nccl:ring/ll")).flavor == algos.flavor("nccl:ring/ll") != ""
    assert ok(p2p=pb.P2PSpec()).flavor == ""


# ---- p2p -----------------------------------------------------------------------------------------


def test_p2p_needs_two_ranks_and_a_known_mode():
    refused("world_size", "at least 2 workers", "world_size is 1", world_size=1, p2p=pb.P2PSpec())
    refused("p2p.pairwise", "at least 2 workers", world_size=1, p2p=pb.P2PSpec(pairwise=True))
    e = refused("p2p.mode", "unknown mode 'pigeon'", "blocking, async", p2p=pb.P2PSpec(mode="pigeon"))
    assert e.message.endswith("expected one of blocking, async")
    assert ok(p2p=pb.P2PSpec()).spec.p2p.mode == "blocking"
    assert ok(p2p=pb.P2PSpec(mode="async")).spec.p2p.mode == "async"


def test_p2p_carries_sizes_pairs_loops_and_memory():
    v = ok(world_size=3, p2p=pb.P2PSpec(min_bytes=8, max_bytes=64, factor=2))
    assert v.sizes == (8, 16, 32, 64) and v.pairs == ((0, 1),) and v.progress_total == 4
    assert v.needs_bytes == 128  # a send and a receive buffer of the largest size
    assert (v.spec.p2p.iters, v.spec.p2p.warmup) == (specs.DEFAULTS["iters"], specs.DEFAULTS["warmup"])
    explicit = ok(p2p=pb.P2PSpec(sizes=[1000], iters=7, warmup=0)).spec.p2p
    assert (explicit.iters, explicit.warmup, explicit.HasField("warmup")) == (7, 0, True)
    assert ok(p2p=pb.P2PSpec(sizes=[1000], warmup=3)).spec.p2p.warmup == 3
    pw = ok(world_size=3, p2p=pb.P2PSpec(sizes=[8, 16], pairwise=True))
    assert pw.pairs == ((0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)) and pw.progress_total == 12
    refused("p2p.factor", "between 1 and 1024", p2p=pb.P2PSpec(factor=0.5))
    refused("p2p.iters", "at most 100000", p2p=pb.P2PSpec(iters=specs.MAX_ITERS + 1))
    refused("p2p.warmup", "at most 100000", p2p=pb.P2PSpec(warmup=specs.MAX_ITERS + 1))


def test_p2p_pairwise_row_limit_at_and_beside_it():
    # 17 ranks x 16 peers = 272 rows per size: 60 sizes are 16320 rows (allowed), 61 are 16592.
    sizes = [8 * (i + 1) for i in range(61)]
    assert ok(world_size=17, p2p=pb.P2PSpec(sizes=sizes[:60], pairwise=True)).progress_total == 16320
    refused("p2p.pairwise", "17 ranks x 16 peers x 61 sizes is 16592 measurements, at most 16384",
            world_size=17, p2p=pb.P2PSpec(sizes=sizes, pairwise=True))
    assert ok(world_size=17, p2p=pb.P2PSpec(sizes=sizes)).progress_total == 61  # only pairwise is bounded


# ---- gradient_average ----------------------------------------------------------------------------


def test_gradient_average_size_limits():
    g = lambda size: pb.GradientAverageSpec(size_bytes=size)  # noqa: E731
    assert ok(gradient_average=g(0)).spec.gradient_average.size_bytes == jobspec.GRADIENT_AVERAGE_DEFAULT_BYTES
    for size in (4, 8, specs.MAX_BYTES):
        v = ok(gradient_average=g(size))
        assert v.spec.gradient_average.size_bytes == size and v.needs_bytes == 2 * size
    for size in (1, 2, 3, 5, 6, specs.MAX_BYTES + 4):
        refused("gradient_average.size_bytes", "multiple of 4", f"got {size}", gradient_average=g(size))
    v = ok(gradient_average=g(8)).spec.gradient_average
    assert (v.iters, v.warmup) == (20, 5)
    v = ok(gradient_average=pb.GradientAverageSpec(iters=3, warmup=0)).spec.gradient_average
    assert (v.iters, v.warmup, v.HasField("warmup")) == (3, 0, True)
    refused("gradient_average.iters", "at most", gradient_average=pb.GradientAverageSpec(iters=specs.MAX_ITERS + 1))
    v = ok(gradient_average=g(8))
    assert (v.sizes, v.pairs, v.progress_total, v.op) == ((), (), 1, "gradient_average")


# ---- train ---------------------------------------------------------------------------------------


def test_train_limits_at_and_beside_them():
    t = pb.TrainSpec
    for steps in (1, jobspec.MAX_TRAIN_STEPS):
        v = ok(train=t(steps=steps))
        assert v.spec.train.steps == steps and v.progress_total == steps
    for steps in (0, jobspec.MAX_TRAIN_STEPS + 1):
        refused("train.steps", "between 1 and 100000", f"got {steps}", train=t(steps=steps))
    for batch in (1, jobspec.MAX_BATCH_SIZE):
        assert ok(train=t(batch_size=batch)).spec.train.batch_size == batch
    for batch in (0, jobspec.MAX_BATCH_SIZE + 1):
        refused("train.batch_size", f"between 1 and {jobspec.MAX_BATCH_SIZE}", f"got {batch}", train=t(batch_size=batch))
    for lr in (1e-300, 0.05, 10.0):
        assert ok(train=t(lr=lr)).spec.train.lr == lr
    for lr in (0.0, -0.0, -1.0, float("nan"), float("inf")):
        refused("train.lr", "positive number", train=t(lr=lr))
    e = refused("train.model", "unknown model 'gpt'", train=t(model="gpt"))
    assert e.message.endswith("expected one of linear, mlp")
    d = ok(train=t()).spec.train
    assert (d.model, d.steps, d.batch_size, d.lr) == ("linear", 50, 64, 0.05)
    assert ok(train=t()).needs_bytes == 0


# ---- algo_sweep ----------------------------------------------------------------------------------


def test_algo_sweep_dtype_algos_and_loops():
    a = pb.AlgoSweepSpec
    assert ok(algo_sweep=a()).spec.algo_sweep.dtype == "float32"
    e = refused("algo_sweep.dtype", "float32, bfloat16", "got 'int8'", algo_sweep=a(dtype="int8"))
    assert e.message.startswith("must be one of")
    assert refused("algo_sweep.algos", algo_sweep=a(algos=["gloo", "gloo"])).message == "lists an algo twice"
    assert "mixes gloo and nccl" in refused("algo_sweep.algos", algo_sweep=a(algos=["gloo", "nccl"])).message
    refused("algo_sweep.algos", algo_sweep=a(algos=["nosuch"]))
    assert list(ok(algo_sweep=a(algos=["NCCL:Ring/LL"])).spec.algo_sweep.algos) == ["nccl:ring/ll"]
    d = ok(algo_sweep=a()).spec.algo_sweep
    assert (d.iters, d.warmup, d.min_bytes, d.max_bytes, d.factor) == (0, 5, 8, 64 << 20, 2.0)
    e = ok(algo_sweep=a(iters=9, warmup=0, sizes=[64])).spec.algo_sweep
    assert (e.iters, e.warmup, e.HasField("warmup")) == (9, 0, True)
    assert ok(algo_sweep=a(warmup=2, sizes=[64])).spec.algo_sweep.warmup == 2
    refused("algo_sweep.max_bytes", "below min_bytes", algo_sweep=a(min_bytes=64, max_bytes=8))
    refused("algo_sweep.factor", algo_sweep=a(min_bytes=8, max_bytes=64, factor=1))
    refused("algo_sweep.sizes", "at most 64", algo_sweep=a(sizes=list(range(1, 66))))


def test_algo_sweep_sizes_and_memory_need():
    a = pb.AlgoSweepSpec
    v = ok(world_size=4, algo_sweep=a(min_bytes=16, max_bytes=64))
    assert v.sizes == (16, 32, 64) and v.progress_total == 3
    # Sizes round to whole elements (not to world_size chunks: all_reduce) and repeat once.
    assert ok(world_size=4, algo_sweep=a(sizes=[6, 8, 9, 1 << 20])).sizes == (4, 8, 1 << 20)
    assert ok(world_size=4, algo_sweep=a(sizes=[6], dtype="bfloat16")).sizes == (6,)
    big, small = 1 << 30, 1 << 20
    assert ok(algo_sweep=a(sizes=[small, big])).needs_bytes == 2 * big + algos.SYMM_MAX_BYTES
    assert ok(algo_sweep=a(sizes=[small])).needs_bytes == 2 * small + small
    assert ok(algo_sweep=a(min_bytes=8, max_bytes=8)).needs_bytes == 2 * 8 + 8


def test_algo_sweep_backend_refusal_names_its_field():
    a = pb.AlgoSweepSpec
    v = ok(algo_sweep=a(algos=["nccl:ring/ll", "nccl"]))
    e = v.refusal("gloo")
    assert e.field == "algo_sweep.algos" and "needs the nccl backend, not gloo" in e.message
    assert v.refusal("nccl") is None
    g = ok(algo_sweep=a(graph=True)).refusal("gloo")
    assert g.field == "algo_sweep.graph" and "CUDA graphs need CUDA devices" in g.message
    assert ok(algo_sweep=a(graph=True)).refusal("nccl") is None
    assert ok(algo_sweep=a()).refusal("gloo") is None and ok(algo_sweep=a(algos=["gloo"])).runs_on("gloo")
    assert not ok(algo_sweep=a(algos=["gloo"])).runs_on("nccl")


# ---- what listings and errors name ---------------------------------------------------------------


def test_size_field_and_op_name_per_kind():
    assert jobspec.size_field(ok(collective=coll(sizes=[8]))) == "collective.sizes"
    assert jobspec.size_field(ok(collective=coll())) == "collective.max_bytes"
    assert jobspec.size_field(ok(p2p=pb.P2PSpec(sizes=[8]))) == "p2p.sizes"
    assert jobspec.size_field(ok(algo_sweep=pb.AlgoSweepSpec())) == "algo_sweep.max_bytes"
    assert jobspec.size_field(ok(gradient_average=pb.GradientAverageSpec())) == "gradient_average.size_bytes"
    assert jobspec.op_name(pb.JobSpec(collective=coll(op="gather"))) == "gather"
    assert jobspec.op_name(pb.JobSpec(train=pb.TrainSpec())) == "train"
    assert jobspec.op_name(pb.JobSpec()) == ""


def test_size_field_of_the_check_kinds_names_a_field_they_have():
    # The check kinds' specs have no `sizes`: asking used to raise AttributeError (an HTTP 500).
    assert jobspec.size_field(ok(gpu_check=pb.GpuCheckSpec(copy_bytes=1 << 30))) == "gpu_check.copy_bytes"
    assert jobspec.size_field(ok(gpu_check=pb.GpuCheckSpec(matmul_n=32768))) == "gpu_check.matmul_n"
    assert jobspec.size_field(ok(link_matrix=pb.LinkMatrixSpec())) == "link_matrix.size_bytes"
    assert jobspec.size_field(ok(sdc_check=pb.SdcCheckSpec())) == "sdc_check"


def test_a_gpu_check_whose_copy_cannot_fit_the_fleet_is_refused_naming_the_field():
    from coordinator.core import admission
    from ringleader.v1 import workers_pb2 as wpb

    small = wpb.Register(backend="nccl", device=pb.Device(type="cuda", name="small GPU", memory_bytes=4 << 30))
    with pytest.raises(InvalidSpec) as err:
        admission.check(ok(gpu_check=pb.GpuCheckSpec(copy_bytes=8 << 30)), [small])
    assert err.value.field == "gpu_check.copy_bytes" and "small GPU" in err.value.message, err.value
