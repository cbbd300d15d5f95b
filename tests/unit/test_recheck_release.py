"""A recheck releases a worker a link check condemned only on evidence as strong as what condemned
it (coordinator/health/recheck.py's hold_unfounded_releases): its links against the links that do
not touch it. Real link results (worker/checks/link_matrix.link_result), real verdicts, a real
HealthBook on the in-memory store."""

from __future__ import annotations

from coordinator.health import book as health, recheck, verdicts
from coordinator.store.memory import MemoryJobStore
from ringleader.v1 import jobs_pb2 as pb
from worker.checks import link_matrix

HOSTS = ["h0", "h1", "h2"]  # a 3-worker recheck: the suspect w0 and two peers


def _recheck(suspect_gbps: float, peer_link_disagrees: bool) -> pb.Job:
    """The three links of a recheck: w0's two at `suspect_gbps`, the peers' one at 1.0 GB/s."""
    rows = [dict(a=a, b=b, round=r, latency_us=1.0, wrong=0, gbps=1.0 if a else suspect_gbps,
                 ends_disagree=peer_link_disagrees and a == 1) for r, (a, b) in enumerate([(0, 1), (0, 2), (1, 2)])]
    return _link_job("recheck-1", rows, HOSTS)


def _link_job(job_id: str, rows: list[dict], hosts: list[str]) -> pb.Job:
    """A finished link check of these measured rows, one worker w<rank> on each host."""
    job = pb.Job(id=job_id, state=pb.SUCCEEDED, finished_at=200.0)
    job.spec.link_matrix.SetInParent()
    job.spec.world_size = len(hosts)
    job.link_matrix.CopyFrom(link_matrix.link_result(rows, hosts, 1 << 19, len(hosts) - 1 + len(hosts) % 2))
    for r, h in enumerate(hosts):
        job.workers.add(worker_id=f"w{r}", rank=r, host=h)
    return job


def _condemned_book() -> health.HealthBook:
    now = [100.0]
    book = health.HealthBook(MemoryJobStore(), lambda: now[0])
    book.record({"w0": pb.WorkerHealth(verdict=pb.UNHEALTHY, check="link_matrix", figure="0.2 of the median", at=100.0)})
    assert book.quarantined("w0")
    return book


def _apply(book: health.HealthBook, job: pb.Job) -> list:
    return book.record(recheck.hold_unfounded_releases(job, verdicts.of_job(job), book.get))


def test_the_suspects_own_links_never_release_it():
    # The one clean link dropped for ends_disagree: the suspect's own links set the median and the
    # check alone calls it healthy; it is not released on that.
    job = _recheck(0.2, peer_link_disagrees=True)
    assert verdicts.of_job(job)["w0"].verdict == pb.HEALTHY  # what the check says without the guard
    book = _condemned_book()
    assert _apply(book, job) == []
    assert book.quarantined("w0") and book.get("w0").verdict == pb.UNHEALTHY
    assert "no cross-host link without it" in book.get("w0").figure


def test_a_host_inside_the_checks_band_but_below_the_release_share_stays_out():
    # At 0.6 of its peers' link the check's own band (0.7 of a median the suspect pulls down) passes
    # it; against the link without it, it is not yet as good as what condemned it asked.
    job = _recheck(0.6, peer_link_disagrees=False)
    assert verdicts.of_job(job)["w0"].verdict == pb.HEALTHY
    book = _condemned_book()
    _apply(book, job)
    assert book.quarantined("w0") and "0.60 of the median" in book.get("w0").figure


def test_a_constant_fault_keeps_one_verdict_over_rechecks():
    book = _condemned_book()
    for suspect, disagree in [(0.2, True), (0.6, False), (0.2, False), (0.5, True)]:
        assert _apply(book, _recheck(suspect, disagree)) == []  # no quarantine change: no flapping
        assert book.quarantined("w0")


def test_a_recovered_host_is_released():
    book = _condemned_book()
    assert _apply(book, _recheck(0.95, peer_link_disagrees=False)) == [("w0", False)]
    assert book.get("w0").verdict == pb.HEALTHY


def _fleet_check(suspect_gbps: list[float]) -> pb.Job:
    """A clean check of 8 hosts (the fleet beds' default check) on a busy machine: w0's 7 links at
    `suspect_gbps`, the other 21 spread over 0.6-1.4 GB/s (a median of 1.0)."""
    hosts = [f"h{i}" for i in range(8)]
    pairs = [(a, b) for a in range(8) for b in range(a + 1, 8)]
    rows = [dict(a=a, b=b, round=k, latency_us=1.0, wrong=0,
                 gbps=suspect_gbps[b - 1] if a == 0 else 1.0 + 0.1 * ((3 * a + 5 * b) % 9 - 4))
            for k, (a, b) in enumerate(pairs)]
    return _link_job("check-1", rows, hosts)


def test_one_slow_link_of_seven_does_not_hold_a_recovered_host():
    # A busy host slows one link of a clean check (CI: one of w5's 7 links read under 0.7 of the
    # median and the recovered host stayed UNHEALTHY). It was condemned by most of its links.
    book = _condemned_book()
    assert _apply(book, _fleet_check([0.6, 1.0, 0.95, 1.0, 1.05, 1.0, 0.9])) == [("w0", False)]
    assert book.get("w0").verdict == pb.HEALTHY


def test_a_host_with_half_its_links_slow_stays_out():
    # 4 of 7 under the share: as many as would condemn it (most links) are not evidence to release.
    book = _condemned_book()
    job = _fleet_check([0.6, 0.5, 0.65, 0.6, 1.0, 1.0, 1.0])
    assert verdicts.of_job(job)["w0"].verdict == pb.HEALTHY  # inside the noisy check's own band
    assert _apply(book, job) == []
    assert book.quarantined("w0") and "4 of 7 links below 0.70" in book.get("w0").figure


def test_other_workers_and_fresh_verdicts_are_left_alone():
    # A worker not condemned by a link check is judged by the check as it is (nothing to release).
    job = _recheck(0.2, peer_link_disagrees=True)
    found = verdicts.of_job(job)
    fresh = health.HealthBook(MemoryJobStore(), lambda: 100.0)
    assert recheck.hold_unfounded_releases(job, found, fresh.get) == found
