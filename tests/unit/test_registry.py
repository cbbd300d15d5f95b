"""The worker registry: listing order and pages, expiry of disconnected workers, fleet kinds."""

import collections
import time

import pytest

from coordinator.core.registry import WorkerRegistry, decode_token, encode_token
from ringleader.errors import AlreadyExists, InvalidSpec
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb


def reg(wid, host="h1", idx=0, backend="gloo", dtype="cpu", name="cpu", mem=0):
    return wpb.Register(worker_id=wid, host=host, address="127.0.0.1", backend=backend,
                        device=pb.Device(type=dtype, index=idx, name=name, memory_bytes=mem))


def test_pages_in_host_device_order_with_state_filter():
    r = WorkerRegistry()
    for wid, host, idx in [("c", "h2", 0), ("a", "h1", 1), ("b", "h1", 0), ("d", "h3", 0), ("e", "h2", 1)]:
        r.add(reg(wid, host, idx))
    r.get("e").transition(pb.BUSY, "job", 0)
    seen, token = [], ""
    while True:
        page, token = r.page(limit=2, token=token)
        seen.append([c.worker_id for c in page])
        if not token:
            break
    assert seen == [["b", "a"], ["c", "e"], ["d"]]
    assert [c.worker_id for c in r.page([pb.BUSY])[0]] == ["e"]
    page, token = r.page([pb.IDLE], limit=4)
    assert [c.worker_id for c in page] == ["b", "a", "c", "d"] and token == ""  # no empty last page


def test_a_page_token_survives_its_worker_leaving():
    r = WorkerRegistry(ttl_s=0)
    for i in range(4):
        r.add(reg(f"w{i}", idx=i))
    page, token = r.page(limit=2)
    r.get("w1").transition(pb.DISCONNECTED)
    r.expire(now=float("inf"))  # w1, the last of the page, is forgotten
    assert [c.worker_id for c in r.page(limit=2, token=token)[0]] == ["w2", "w3"]


@pytest.mark.parametrize("token", ["x", encode_token(("h", 0, "w"))[:-3], "e30=", "W10=", "a" * 3000])
def test_a_foreign_page_token_is_refused_naming_the_field(token):
    with pytest.raises(InvalidSpec) as err:
        decode_token(token)
    assert err.value.field == "page_token"


def test_disconnected_workers_expire_after_the_ttl_and_may_come_back():
    r = WorkerRegistry(ttl_s=60)
    for i in range(3):
        r.add(reg(f"w{i}", idx=i))
    w0 = r.get("w0")
    w0.transition(pb.DISCONNECTED)
    left = w0.disconnected_at
    r.get("w1").transition(pb.DISCONNECTED)
    with pytest.raises(AlreadyExists):
        r.add(reg("w2", idx=2))  # still connected
    assert r.expire(now=left + 30) == []
    back = r.add(reg("w1", idx=1))  # came back before its TTL: stays
    assert r.expire(now=left + 61) == ["w0"]
    assert [c.worker_id for c in r.all()] == ["w1", "w2"] and r.get("w1") is back and r.get("w0") is None
    r.add(reg("w0", idx=0))  # a forgotten worker registers again
    assert [c.worker_id for c in r.all()] == ["w0", "w1", "w2"]


def test_kinds_summarise_connected_workers_and_a_worker_that_leaves_is_no_longer_counted():
    r = WorkerRegistry()
    r.add(reg("g0"))
    r.add(reg("g1", idx=1))
    r.add(reg("n0", "h2", 0, backend="nccl", dtype="cuda", name="NVIDIA H200", mem=140 << 30))
    kinds = sorted((k.backend, k.device.type, k.device.name, k.device.memory_bytes) for k in r.kinds())
    assert kinds == [("gloo", "cpu", "cpu", 0), ("nccl", "cuda", "NVIDIA H200", 140 << 30)]
    n0 = r.get("n0")
    n0.transition(pb.BUSY, "j", 0)
    assert (n0.state, len(r.kinds())) == (pb.BUSY, 2)  # busy is still connected
    n0.transition(pb.DISCONNECTED)
    assert [k.backend for k in r.kinds()] == ["gloo"]
    assert n0.state == pb.DISCONNECTED
    assert {c.worker_id for c in r.connected()} == {"g0", "g1"}


def test_counts_by_state_follow_every_change_as_a_walk_of_the_workers_would():
    import random

    rng = random.Random(3)
    r = WorkerRegistry(ttl_s=5.0)
    for _ in range(2000):
        wid = f"w{rng.randrange(40)}"
        conn = r.get(wid)
        step = rng.random()
        if conn is None or (not conn.connected and step < 0.5):
            r.add(wpb.Register(worker_id=wid, host=f"h{wid}", backend=rng.choice(["gloo", "nccl"]),
                               device=pb.Device(type="cpu")))
        elif conn.connected and step < 0.2:
            conn.transition(pb.DISCONNECTED)
        elif conn.connected:
            conn.transition(pb.BUSY if conn.state == pb.IDLE else pb.IDLE, job_id="j" if conn.state == pb.IDLE else "")
        if rng.random() < 0.05:  # past the TTL: the disconnected ones leave the listing
            r.expire(time.monotonic() + 10.0)
        walked = collections.Counter((c.state, c.reg.backend) for c in r.all())
        assert r.by_state == walked


def test_silent_finds_exactly_the_connected_workers_silent_past_a_time():
    """WorkerRegistry.silent against a walk of every connected worker, over random heartbeats,
    disconnections and returns (liveness.py's use; the unwell index beside it)."""
    import random

    draw, r, now = random.Random(11), WorkerRegistry(), 1000.0
    ids = [f"w{i}" for i in range(200)]
    for wid in ids:
        r.add(reg(wid, host=f"h{wid}"), mono=now - draw.uniform(0, 1))
    found = 0
    for _ in range(300):
        now += 0.5
        for _ in range(draw.randrange(80)):
            wid, roll = draw.choice(ids), draw.random()
            conn = r.get(wid)
            if roll < 0.9 and conn.connected:
                conn.last_heartbeat = now - draw.uniform(0, 0.5)
            elif roll < 0.95 and conn.connected:
                conn.unwell_since = now
                r.mark_unwell(conn, True)
                conn.transition(pb.DISCONNECTED, at=now)
            elif not conn.connected:
                r.add(reg(wid, host=f"h{wid}"), mono=now)
        walk = sorted(c.worker_id for c in r.connected() if c.last_heartbeat < now - 5.0)
        assert sorted(c.worker_id for c in r.silent(now - 5.0)) == walk
        assert all(c.connected for c in r.unwell.values())  # a worker that left leaves the index
        found += bool(walk)
    assert found > 20  # the draw made silent workers often


def test_a_worker_joining_or_leaving_touches_the_workers_whose_drift_counts_it():
    # c2 runs NCCL_PROTO=LL among peers without it: its words count the others. When c3 joins,
    # "2 others" becomes "3 others", and a reader following the touched workers must hear of c2
    # at once (the read view's next scan came up to 1 s late: make test read "2 others").
    r = WorkerRegistry()
    r.follow()
    settings = {"c2": {"NCCL_PROTO": "LL"}}
    for wid in ("c0", "c1", "c2"):
        r.add(wpb.Register(worker_id=wid, host=wid, address="127.0.0.1", backend="gloo",
                           device=pb.Device(type="cpu", name="cpu"),
                           fingerprint=pb.ConfigFingerprint(settings=settings.get(wid, {}))))
    assert r.get("c2").info().config_drift == "NCCL_PROTO=LL (2 others: unset)"
    assert r.get("c0").info().config_drift == ""
    r.take_touched()
    r.add(wpb.Register(worker_id="c3", host="c3", address="127.0.0.1", backend="gloo",
                       device=pb.Device(type="cpu", name="cpu")))
    assert set(r.take_touched()) == {"c2", "c3"}  # not c0 or c1: their words did not change
    assert r.get("c2").info().config_drift == "NCCL_PROTO=LL (3 others: unset)"
    r.get("c3").transition(pb.DISCONNECTED, "", 0)
    assert set(r.take_touched()) == {"c2", "c3"}
    assert r.get("c2").info().config_drift == "NCCL_PROTO=LL (2 others: unset)"
