"""Submit-time admission against the connected fleet (pure, no servers)."""

import pytest

from coordinator.core import admission
from ringleader import jobspec
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb


def worker(backend="gloo", dtype="cpu", memory=16 << 30, name="x86_64"):
    return wpb.Register(worker_id=f"{backend}-{dtype}", host="h1", address="10.0.0.1", backend=backend,
                        device=pb.Device(type=dtype, name=name, memory_bytes=memory))


def collective(**kw):
    return pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="all_reduce", **kw))


def check(spec, fleet):
    admission.check(jobspec.normalize(spec), fleet)


def test_empty_fleet_admits_everything():
    check(collective(dtype="int32", reduce_op="avg", sizes=[1 << 40]), [])


def test_backend_refusal_names_the_field_and_backend():
    with pytest.raises(InvalidSpec) as err:
        check(collective(dtype="int32", reduce_op="avg"), [worker()])
    assert str(err.value) == "collective.reduce_op: avg on int32 is not supported by the gloo backend"
    check(collective(dtype="int32", reduce_op="avg"), [worker(), worker("nccl", "cuda", name="H200")])


def test_device_type_narrows_the_backends_considered():
    fleet = [worker(), worker("nccl", "cuda", name="H200")]
    with pytest.raises(InvalidSpec):
        check(pb.JobSpec(world_size=2, placement=pb.Placement(device_type="cpu"),
                                   collective=pb.CollectiveSpec(op="all_reduce", dtype="int8", reduce_op="avg")), fleet)


@pytest.mark.parametrize("spec,field", [
    (collective(sizes=[64 << 30]), "collective.sizes"),
    (collective(max_bytes=64 << 30), "collective.max_bytes"),
    (pb.JobSpec(world_size=2, p2p=pb.P2PSpec(sizes=[32 << 30])), "p2p.sizes"),
    (pb.JobSpec(world_size=2, gradient_average=pb.GradientAverageSpec(size_bytes=32 << 30)), "gradient_average.size_bytes"),
])
def test_too_large_for_every_device_is_refused_with_numbers(spec, field):
    with pytest.raises(InvalidSpec) as err:
        check(spec, [worker(memory=16 << 30)])
    assert err.value.field == field
    assert "per device, the largest device (x86_64) has 16.0 GiB" in err.value.message


def test_a_well_formed_registration_is_admitted():
    admission.check_registration(worker())


@pytest.mark.parametrize("change,field", [
    (dict(worker_id=""), "register.worker_id"),
    (dict(worker_id="<script>alert(1)</script>"), "register.worker_id"),
    (dict(worker_id="w" * 257), "register.worker_id"),
    (dict(host="a b"), "register.host"),
    (dict(address=""), "register.address"),
    (dict(backend="mpi"), "register.backend"),
    (dict(version="\x00evil"), "register.version"),
    (dict(warm_group="k" * 300), "register.warm_group"),
])
def test_malformed_registrations_name_the_field(change, field):
    reg = worker()
    for name, value in change.items():
        setattr(reg, name, value)
    with pytest.raises(InvalidSpec) as err:
        admission.check_registration(reg)
    assert err.value.field == field


def test_registration_with_an_unknown_device_type_is_refused():
    reg = worker()
    reg.device.type = "tpu"
    with pytest.raises(InvalidSpec) as err:
        admission.check_registration(reg)
    assert err.value.field == "register.device.type"


# ---- result rows a worker reports --------------------------------------------------------------


def _row(**kw):
    fields = dict(op="all_reduce", dtype="float32", reduce_op="sum", size_bytes=1024, world_size=2)
    return pb.SizeResult(**{**fields, **kw})


@pytest.mark.parametrize("change,why", [
    (dict(op="<script>alert(1)</script>"), "op '<script>alert(1)</script>' is not the job's 'all_reduce'"),
    (dict(op="broadcast"), "op 'broadcast' is not the job's 'all_reduce'"),
    (dict(dtype="int8"), "dtype 'int8' is not the job's 'float32'"),
    (dict(reduce_op="max"), "reduce_op 'max' is not the job's 'sum'"),
    (dict(world_size=7), "world_size 7 is not the job's 2"),
    (dict(size_bytes=4096), "size 4096 is not one the job measures"),
])
def test_result_rows_must_be_the_jobs_own(change, why):
    valid = jobspec.normalize(collective(sizes=[1024, 2048]))
    assert admission.result_refusal(valid, _row()) == ""
    assert admission.result_refusal(valid, _row(size_bytes=2048)) == ""
    assert admission.result_refusal(valid, _row(**change)) == why


def test_result_rows_of_barrier_and_other_kinds():
    barrier = jobspec.normalize(pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="barrier")))
    assert admission.result_refusal(barrier, _row(op="barrier", size_bytes=0)) == ""
    train = jobspec.normalize(pb.JobSpec(world_size=2, train=pb.TrainSpec()))
    assert admission.result_refusal(train, _row()) == "a train job has no per-size results"
