"""Remediation hooks (coordinator/health/hooks.py) through the facade in process (the test plays the
worker daemons, as test_health_reactor.py does), delivering to a real HTTP receiver on 127.0.0.1
that fails the first deliveries: every verdict change arrives exactly once, in CloudEvents shape,
with ids that hold across retries and a coordinator restart; the circuit breaker's hold says
"hold", not "drain"; the delivery log is kept in the job store."""

from __future__ import annotations

import threading
import time

import pytest

from coordinator.shell.facade import Coordinator, Timings
from coordinator.health.hooks import DELIVERED, GAVE_UP, PENDING, VERDICT_CHANGED, HookSender
from ringleader.errors import InvalidSpec
from ringleader.v1 import jobs_pb2 as pb
from test_facade import Worker
from test_health_reactor import start_check
from webhook_receiver import Receiver


@pytest.fixture
def receiver():
    r = Receiver(fail_first=2)
    yield r
    r.server.shutdown()
    r.server.server_close()


class LockedLog:
    """The delivery log as the process wires it (the store written on one thread at a time)."""

    def __init__(self, store) -> None:
        self.store, self.lock = store, threading.Lock()

    def put(self, d: pb.HooksDelivery) -> None:
        with self.lock:
            self.store.put_hook_delivery(d)

    def all(self) -> list[pb.HooksDelivery]:
        with self.lock:
            return self.store.hook_deliveries()


def settled(log: LockedLog, n: int, timeout_s: float = 10.0) -> list[pb.HooksDelivery]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rows = log.all()
        if len(rows) >= n and all(d.state != PENDING for d in rows):
            return rows
        time.sleep(0.02)
    raise AssertionError(f"the log did not settle: {log.all()}")


def test_every_verdict_change_arrives_exactly_once_through_failures_and_a_restart(receiver):
    log = LockedLog(_memory())
    sender = HookSender([receiver.url], log.put, backoff_s=0.05, source="test")
    core = Coordinator(log.store, Timings(heartbeat_timeout_s=30, blame_grace_s=3), health_observers=[sender.observe])
    ws = [Worker(core, f"w{i}", i) for i in range(3)]
    check_id, evidence = start_check(core, ws, bad={"w1"})
    for rank in reversed(range(3)):
        ws[rank].done(check_id, rank, **evidence[rank])
    assert core.fleet.book.quarantined("w1")
    core.cordon("w1", False, force=True)  # the operator puts it back over its verdict: suspect
    events = receiver.wait_for(4)
    time.sleep(0.3)  # a duplicate would arrive meanwhile
    assert len(receiver.events) == 4 and receiver.posts == 6  # two answered 500, each then retried
    assert set(receiver.content_types) == {"application/cloudevents+json"}
    by = [(e["data"]["worker_id"], e["data"]["verdict"], e["data"]["action"]) for e in events]
    assert sorted(by[:3]) == [("w0", "HEALTHY", "return"), ("w1", "UNHEALTHY", "drain"), ("w2", "HEALTHY", "return")]
    assert by[3] == ("w1", "SUSPECT", "return")
    assert len({e["id"] for e in events}) == 4
    for e in events:
        assert e["specversion"] == "1.0" and e["type"] == VERDICT_CHANGED and e["source"] == "test"
        assert e["time"].endswith("Z") and e["subject"] == e["data"]["worker_id"]
    failed = next(e for e in events if e["data"]["verdict"] == "UNHEALTHY")["data"]
    assert failed["check"] == "gpu_check" and failed["quarantined"] and failed["figure"] and failed["expected"]
    rows = settled(log, 4)
    assert sorted(d.attempts for d in rows) == [1, 1, 1, 3]  # one URL: in order, the first took both 500s and {d.state for d in rows} == {DELIVERED}
    sender.close()

    # A restart: a new sender with the log, told again of every worker's verdict (the same ones).
    again = HookSender([receiver.url], log.put, log_so_far=log.all(), backoff_s=0.05, source="test")
    for w in ("w0", "w1", "w2"):
        again.observe(core.fleet.info(w))
    time.sleep(0.3)
    assert len(receiver.events) == 4  # nothing delivered twice
    again.close()


def _memory():
    from coordinator.store.memory import MemoryJobStore

    return MemoryJobStore()


def test_a_pending_delivery_is_sent_again_after_a_restart_with_its_id(receiver):
    log = LockedLog(_memory())
    receiver.fail_first = 1000  # down
    first = HookSender([receiver.url], log.put, backoff_s=0.05)
    first.observe(pb.WorkerInfo(worker_id="w7", host="h", health=pb.WorkerHealth(
        verdict=pb.UNHEALTHY, check="gpu_check", figure="0.1 TFLOP/s", at=1000.0)))
    deadline = time.monotonic() + 5
    while not any(d.attempts >= 2 for d in log.all()) and time.monotonic() < deadline:
        time.sleep(0.02)
    first.close()
    (pending,) = log.all()
    assert pending.state == PENDING and pending.attempts >= 2 and "HTTP 500" in pending.last_error
    receiver.fail_first = 0
    second = HookSender([receiver.url], log.put, log_so_far=log.all(), backoff_s=0.05)
    (event,) = receiver.wait_for(1)
    assert event["id"] == pending.event_id
    (row,) = settled(log, 1)
    assert row.state == DELIVERED
    second.close()


def test_the_circuit_breakers_hold_says_hold_not_drain(receiver):
    receiver.fail_first = 0
    core = Coordinator(_memory(), quarantine_max_share=0.1)
    log = LockedLog(_memory())
    sender = HookSender([receiver.url], log.put, backoff_s=0.05)
    core.fleet.observers = (sender.observe,)
    ws = [Worker(core, f"w{i}", i) for i in range(10)]
    check_id, evidence = start_check(core, ws, bad={"w2", "w5"})
    for rank in reversed(range(10)):
        ws[rank].done(check_id, rank, **evidence[rank])
    events = receiver.wait_for(10)
    actions = {e["data"]["worker_id"]: (e["data"]["action"], e["data"]["held"]) for e in events}
    assert actions["w2"] == ("drain", False) and actions["w5"] == ("hold", True)
    assert {a for w, a in actions.items() if w not in ("w2", "w5")} == {("return", False)}
    sender.close()


def test_a_receiver_that_never_answers_well_is_given_up_and_logged(receiver):
    receiver.fail_first = 1000
    log = LockedLog(_memory())
    sender = HookSender([receiver.url], log.put, attempts=3, backoff_s=0.01)
    sender.observe(pb.WorkerInfo(worker_id="w1", health=pb.WorkerHealth(verdict=pb.HEALTHY, check="sdc_check", at=5.0)))
    (row,) = settled(log, 1)
    assert row.state == GAVE_UP and row.attempts == 3 and receiver.posts == 3


def test_a_webhook_that_is_not_an_http_url_is_refused_naming_the_flag():
    with pytest.raises(InvalidSpec, match="--webhook"):
        HookSender(["ftp://x"], lambda d: None)
