"""JobSpec.rendezvous_timeout_s: forming a group has its own deadline, within the op deadline."""

import pytest

from ringleader import jobspec
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb


def _spec(**kw) -> pb.JobSpec:
    return pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="all_reduce"), **kw)


@pytest.mark.parametrize("kw,expected", [
    (dict(), jobspec.DEFAULT_RENDEZVOUS_TIMEOUT_S),
    (dict(rendezvous_timeout_s=5), 5.0),
    (dict(op_timeout_s=10), 10.0),  # the default never outlasts the op deadline
    (dict(op_timeout_s=10, rendezvous_timeout_s=10), 10.0),
])
def test_rendezvous_timeout_is_filled_in_and_kept(kw, expected):
    assert jobspec.normalize(_spec(**kw)).spec.rendezvous_timeout_s == expected


@pytest.mark.parametrize("kw,said", [
    (dict(rendezvous_timeout_s=-1), "must be a number of seconds"),
    (dict(rendezvous_timeout_s=float("nan")), "must be a number of seconds"),
    (dict(rendezvous_timeout_s=float("inf")), "must be a number of seconds"),
    (dict(op_timeout_s=10, rendezvous_timeout_s=11), "must be at most op_timeout_s (10 s), got 11"),
    (dict(rendezvous_timeout_s=121), "must be at most op_timeout_s (120 s), got 121"),  # the default op deadline
])
def test_bad_rendezvous_timeout_names_the_field(kw, said):
    with pytest.raises(InvalidSpec) as err:
        jobspec.normalize(_spec(**kw))
    assert err.value.field == "rendezvous_timeout_s"
    assert said in str(err.value)
