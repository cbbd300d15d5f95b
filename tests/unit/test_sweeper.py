"""Which check jobs a request or a sweep plans (coordinator/health/sweeper.py's pure part)."""

from __future__ import annotations

import pytest

from coordinator.health import sweeper
from ringleader import checks
from ringleader.errors import InvalidSpec, NotFound
from ringleader.v1 import jobs_pb2 as pb


def _w(wid, host="h0", backend="gloo", state=pb.IDLE, index=0):
    return pb.WorkerInfo(worker_id=wid, host=host, backend=backend, state=state, device=pb.Device(index=index))


FLEET = [_w("g1", "h1", "nccl", index=1), _w("g0", "h1", "nccl"), _w("c0"), _w("c1", "h2"),
         _w("gone", state=pb.DISCONNECTED), _w("q", "h2", state=pb.QUARANTINED)]


def test_a_request_names_workers_a_host_or_all_connected():
    assert [w.worker_id for w in sweeper.chosen(FLEET)] == ["g1", "g0", "c0", "c1", "q"]
    assert [w.worker_id for w in sweeper.chosen(FLEET, host="h2")] == ["c1", "q"]
    assert [w.worker_id for w in sweeper.chosen(FLEET, ["q", "c0"], host="h2")] == ["q", "c0"]
    with pytest.raises(NotFound, match="gone"):
        sweeper.chosen(FLEET, ["c0", "gone"])


def test_one_job_per_kind_and_backend_at_the_lowest_priority():
    specs = sweeper.plan(sweeper.chosen(FLEET))
    got = [(s.WhichOneof("kind"), list(s.placement.worker_ids)) for s in specs]
    assert got == [("link_matrix", ["c0", "c1", "q"]), ("link_matrix", ["g0", "g1"]),
                   ("gpu_check", ["c0", "c1", "q"]), ("gpu_check", ["g0", "g1"]),
                   ("sdc_check", ["c0", "c1", "q"]), ("sdc_check", ["g0", "g1"])]
    assert all(s.priority == checks.CHECK_PRIORITY and s.world_size == len(s.placement.worker_ids) for s in specs)
    assert specs[0].link_matrix == sweeper.short("link_matrix")


def test_settings_given_win_and_a_lone_worker_has_no_link_to_check():
    request = pb.RunCheckRequest(link_matrix=pb.LinkMatrixSpec(size_bytes=4096))
    specs = sweeper.plan([_w("c0"), _w("g0", backend="nccl"), _w("g1", backend="nccl")], ["link_matrix", "gpu_check"],
                         request)
    assert [(s.WhichOneof("kind"), s.world_size) for s in specs] == [("link_matrix", 2), ("gpu_check", 1),
                                                                    ("gpu_check", 2)]
    assert specs[0].link_matrix.size_bytes == 4096 and specs[1].gpu_check == sweeper.short("gpu_check")
    with pytest.raises(InvalidSpec) as e:
        sweeper.plan(FLEET, ["link_matrix", "nope"])
    assert e.value.field == "kinds"


def _h(wid, verdict, check="gpu_check", host="h0", state=pb.IDLE, model="H100", backend="nccl"):
    return pb.WorkerInfo(worker_id=wid, host=host, backend=backend, state=state,
                         device=pb.Device(name=model, index=int(wid[-1])),
                         health=pb.WorkerHealth(verdict=verdict, check=check))


def test_a_recheck_runs_only_the_failed_check_on_the_worker_and_two_healthy_peers():
    from coordinator.health import recheck

    fleet = [_h("a0", pb.HEALTHY), _h("a1", pb.UNHEALTHY), _h("a2", pb.HEALTHY), _h("a3", pb.HEALTHY),
             _h("a4", pb.HEALTHY, state=pb.BUSY), _h("a5", pb.SUSPECT), _h("b6", pb.HEALTHY, model="A100"),
             _h("c7", pb.UNHEALTHY, check="sdc_check", state=pb.QUARANTINED), _h("c8", pb.UNHEALTHY, check="cordon"),
             _h("a9", pb.UNHEALTHY, state=pb.QUARANTINED)]
    specs = recheck.plan(fleet, ["a1", "c7", "c8", "a9"], sweeper.short)
    # a1: its gpu_check with two idle HEALTHY peers of its model, in a job of its own; c7's
    # sdc_check finds no two healthy peers left idle (a0, a2 are taken, a3 alone), so it waits for
    # the next round; a9 gets a job of its own with the peer left rather than share a1's; c8 was
    # cordoned: nothing to rerun.
    assert [(s.WhichOneof("kind"), list(s.placement.worker_ids)) for s in specs] == [
        ("gpu_check", ["a0", "a1", "a2"]), ("gpu_check", ["a3", "a9"])]
    assert specs[0].priority == checks.CHECK_PRIORITY and specs[0].gpu_check == sweeper.short("gpu_check")
    later = recheck.plan(fleet, ["c7", "a9"], sweeper.short)
    assert [list(s.placement.worker_ids) for s in later] == [["a0", "a2", "c7"], ["a3", "a9"]]
    assert later[0].HasField("sdc_check") and later[1].HasField("gpu_check")
