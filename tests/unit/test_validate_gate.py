"""The validation gate's rule in the health book, through the facade in process (the test plays the
worker daemons, as test_health_reactor.py does): a quarantine is lifted by a passing check of what
failed; a worker quarantined 3 times within 24 h stays out after its next pass until a person
approves its return, and approval needs that pass first."""

from __future__ import annotations

import pytest

from coordinator.shell.facade import Coordinator, Timings
from coordinator.health.book import REPEAT_WINDOW_S, HealthBook
from coordinator.store.memory import MemoryJobStore
from ringleader.errors import FailedPrecondition
from ringleader.v1 import jobs_pb2 as pb
from test_facade import Worker, spec
from test_health_reactor import placed, start_check


def run_check(core, ws, bad: set[str]) -> None:
    check_id, evidence = start_check(core, ws, bad=bad)
    for rank in reversed(range(len(ws))):
        ws[rank].done(check_id, rank, **evidence[rank])
    assert core.get(check_id).state == pb.SUCCEEDED


def listed(core, worker_id: str) -> int:
    return {w.worker_id: w.state for w in core.list_workers().workers}[worker_id]


def test_a_repeat_offender_stays_out_after_its_third_quarantine_until_approved_after_a_pass():
    core = Coordinator(MemoryJobStore(), Timings(heartbeat_timeout_s=30, blame_grace_s=3))
    ws = [Worker(core, f"w{i}", i) for i in range(3)]
    book = core.fleet.book
    for n in (1, 2):
        run_check(core, ws, bad={"w1"})
        assert book.quarantined("w1") and len(book.get("w1").validate_quarantined_at) == n
        run_check(core, ws, bad=set())  # a passed validation lifts quarantines 1 and 2
        assert not book.quarantined("w1") and listed(core, "w1") == pb.IDLE
    run_check(core, ws, bad={"w1"})
    assert book.get("w1").validate_needs_approval
    with pytest.raises(FailedPrecondition, match="validate --workers w1"):
        core.fleet.approve_return("w1")  # not before a pass
    run_check(core, ws, bad=set())
    h = book.get("w1")
    assert h.verdict == pb.HEALTHY and book.quarantined("w1") and listed(core, "w1") == pb.QUARANTINED
    job = core.submit(spec(3)).id  # user work waits rather than run on it
    assert core.get(job).state == pb.QUEUED
    info = core.fleet.approve_return("w1")
    assert not info.health.validate_needs_approval and not book.quarantined("w1")
    assert core.get(job).state == pb.RUNNING and sorted(placed(core, job)) == ["w0", "w1", "w2"]
    with pytest.raises(FailedPrecondition, match="needs no approval"):
        core.fleet.approve_return("w1")
    # The other workers were never counted.
    assert not book.get("w0").validate_quarantined_at and not book.get("w2").validate_needs_approval


def test_quarantines_older_than_the_window_are_not_counted():
    now = [1_000_000.0]
    book = HealthBook(MemoryJobStore(), clock=lambda: now[0], max_share=1.0)

    def verdict(v: int) -> None:
        book.record({"w1": pb.WorkerHealth(verdict=v, check="gpu_check", at=now[0])})
        now[0] += 60

    for _ in range(2):
        verdict(pb.UNHEALTHY)
        verdict(pb.HEALTHY)
    now[0] += REPEAT_WINDOW_S  # both age out
    verdict(pb.UNHEALTHY)
    assert list(book.get("w1").validate_quarantined_at) == [now[0] - 60] and not book.get("w1").validate_needs_approval
    verdict(pb.UNHEALTHY)  # the same quarantine going on is not another one
    assert len(book.get("w1").validate_quarantined_at) == 1


def test_a_repeat_offenders_state_survives_a_restart():
    store = MemoryJobStore()
    book = HealthBook(store, max_share=1.0)
    for v in (pb.UNHEALTHY, pb.HEALTHY) * 2 + (pb.UNHEALTHY, pb.HEALTHY):
        book.record({"w1": pb.WorkerHealth(verdict=v, check="gpu_check")})
    again = HealthBook(store, max_share=1.0)
    assert again.quarantined("w1") and again.get("w1").validate_needs_approval
