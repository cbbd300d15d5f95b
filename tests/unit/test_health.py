"""Verdicts from check results (coordinator/health/verdicts.py) and the health book (coordinator/health/book.py):
who is named, with what evidence, quarantine changes, the recheck backoff, cordons, persistence, the
circuit breaker."""

from __future__ import annotations

import pytest

from coordinator.health import book as health, verdicts
from coordinator.store.memory import MemoryJobStore
from coordinator.store.sqlite import SqliteJobStore
from ringleader.v1 import jobs_pb2 as pb
from ringleader.checkmath import gpu as gpu_math
from ringleader.checkmath import links as link_matrix
from ringleader.checkmath.sdc import sdc_result


def _job(kind: str, result, hosts: list[str], state=pb.SUCCEEDED) -> pb.Job:
    job = pb.Job(id="chk-1", state=state, finished_at=100.0)
    getattr(job.spec, kind).SetInParent()
    job.spec.world_size = len(hosts)
    getattr(job, kind).CopyFrom(result)
    for r, h in enumerate(hosts):
        job.workers.add(worker_id=f"w{r}", rank=r, host=h)
    return job


def _link_job(hosts, slow=lambda a, b: False, wrong=()):
    rows = [dict(a=a, b=b, round=0, latency_us=1.0, gbps=0.05 if slow(a, b) else 1.0, wrong=2 if (a, b) in wrong else 0)
            for a in range(len(hosts)) for b in range(a + 1, len(hosts))]
    return _job("link_matrix", link_matrix.link_result(rows, hosts, 1 << 20, len(hosts) - 1), hosts)


def _honest(figures, n, nbytes, iters=10):
    """GPU check reports of ranks with a turn each, as long as their figures claim."""
    seen = [gpu_math.claimed_s(t, c, n, nbytes, iters) for t, c in figures]
    return [(r, (t, c, 0), seen) for r, (t, c) in enumerate(figures)]


def _by_verdict(found):
    return {v: sorted(w for w, h in found.items() if h.verdict == v) for v in (pb.HEALTHY, pb.SUSPECT, pb.UNHEALTHY)}


def test_a_slow_host_is_named_and_no_other():
    hosts = [f"h{i}" for i in range(8)]
    job = _link_job(hosts, slow=lambda a, b: 5 in (a, b))
    found = verdicts.of_job(job)
    assert _by_verdict(found) == {pb.HEALTHY: [f"w{i}" for i in range(8) if i != 5], pb.SUSPECT: [], pb.UNHEALTHY: ["w5"]}
    assert verdicts.named_hosts(job) == ["h5"]
    w5 = found["w5"]
    assert w5.check == "link_matrix" and w5.job_id == "chk-1" and w5.at == 100.0
    assert w5.figure.startswith("7 of 7 links flagged") and "across hosts: median 1 GB/s, bound 0.7" in w5.expected


def test_a_host_of_two_workers_is_named_by_its_cross_host_links():
    hosts = ["h0", "h0", "h1", "h1", "h2", "h2"]
    # Host h1's NIC is slow: every link leaving it (8 of the 12 cross-host links, so a plain
    # median would call them normal); its own same-host link is fine.
    job = _link_job(hosts, slow=lambda a, b: (hosts[a] == "h1") != (hosts[b] == "h1"))
    assert _by_verdict(verdicts.of_job(job))[pb.UNHEALTHY] == ["w2", "w3"]
    assert verdicts.named_hosts(job) == ["h1"]


def test_a_lone_bad_link_makes_its_ends_suspect():
    hosts = [f"h{i}" for i in range(4)]
    found = verdicts.of_job(_link_job(hosts, wrong={(1, 2)}))
    assert _by_verdict(found) == {pb.HEALTHY: ["w0", "w3"], pb.SUSPECT: ["w1", "w2"], pb.UNHEALTHY: []}
    assert "bytes wrong" in found["w1"].figure


def test_clean_links_give_healthy_verdicts_and_unfinished_jobs_none():
    hosts = [f"h{i}" for i in range(4)]
    assert _by_verdict(verdicts.of_job(_link_job(hosts)))[pb.HEALTHY] == ["w0", "w1", "w2", "w3"]
    failed = _link_job(hosts)
    failed.state = pb.FAILED
    assert verdicts.of_job(failed) == {} and verdicts.of_job(pb.Job(state=pb.SUCCEEDED)) == {}


def test_a_refusal_on_a_turn_longer_than_the_job_ran_fails_nobody():
    # Two ranks: the other's account of rank 0's turn is 100 s longer, so the median (their mean)
    # refuses rank 0 and judges it at a fiftieth. The coordinator saw the whole job run 3 s.
    claim = gpu_math.claimed_s(800.0, 4300.0, 8192, 1 << 30, 10)
    reports = [(0, (800.0, 4300.0, 0), [claim, claim]), (1, (800.0, 4300.0, 0), [claim + 100.0, claim])]
    job = _job("gpu_check", gpu_math.gpu_result(["H200"] * 2, reports, 8192, "bfloat16", 1 << 30, 10), ["a", "b"])
    assert job.gpu_check.workers[0].refused and job.gpu_check.workers[0].flagged
    job.started_at, job.finished_at = 1000.0, 1003.0
    found = verdicts.of_job(job)
    assert _by_verdict(found) == {pb.HEALTHY: ["w1"], pb.SUSPECT: ["w0"], pb.UNHEALTHY: []}
    assert "coordinator's clock" in found["w0"].figure
    job.finished_at = 1200.0  # a job that ran long enough for that turn: judged on it
    assert _by_verdict(verdicts.of_job(job))[pb.UNHEALTHY] == ["w0"]


def test_gpu_and_sdc_verdicts_carry_figures_and_expectations():
    g = gpu_math.gpu_result(["H200"] * 3, _honest([(800.0, 4300.0), (100.0, 4300.0), (790.0, 4200.0)], 8192, 1 << 30),
                             8192, "bfloat16", 1 << 30, 10)
    found = verdicts.of_job(_job("gpu_check", g, ["a", "b", "c"]))
    assert _by_verdict(found)[pb.UNHEALTHY] == ["w1"]
    assert "100 TFLOP/s" in found["w1"].figure and "3 H200 peers: 790 TFLOP/s" in found["w1"].expected
    assert "flagged below" in found["w1"].expected
    s = sdc_result([("m", "aa", 0, [0] * 3), ("m", "bb", 0, [0] * 3), ("m", "aa", 0, [0] * 3)])
    assert _by_verdict(verdicts.of_job(_job("sdc_check", s, ["a", "b", "c"])))[pb.UNHEALTHY] == ["w1"]
    tie = sdc_result([("m", "aa", 0, [0, 0]), ("m", "bb", 0, [0, 0])])
    assert _by_verdict(verdicts.of_job(_job("sdc_check", tie, ["a", "b"])))[pb.SUSPECT] == ["w0", "w1"]


def test_sdc_blame_goes_to_the_sender_and_a_lone_accuser_is_suspect():
    hosts = ["a", "b", "c", "d"]
    rogue = sdc_result([("m", "aa", 1, [0, 0, 5, 0]), ("m", "aa", 1, [0, 0, 5, 0]),
                                  ("m", "aa", 1, [0, 0, 0, 0]), ("m", "aa", 1, [0, 0, 5, 0])])
    found = verdicts.of_job(_job("sdc_check", rogue, hosts))
    assert _by_verdict(found) == {pb.HEALTHY: ["w0", "w1", "w3"], pb.SUSPECT: [], pb.UNHEALTHY: ["w2"]}
    assert "by 3 of 3 receivers" in found["w2"].figure
    liar = sdc_result([("m", "aa", 0, [0, 9, 0, 0])] + [("m", "aa", 0, [0] * 4)] * 3)
    assert _by_verdict(verdicts.of_job(_job("sdc_check", liar, hosts))) == {
        pb.HEALTHY: ["w1", "w2", "w3"], pb.SUSPECT: ["w0"], pb.UNHEALTHY: []}
    lone_sum = sdc_result([("m", "aa", 2, [0] * 4)] + [("m", "aa", 0, [0] * 4)] * 3)
    assert _by_verdict(verdicts.of_job(_job("sdc_check", lone_sum, hosts)))[pb.SUSPECT] == ["w0"]


def test_a_rank_whose_peers_dispute_its_link_figures_is_suspect_and_no_link_is_named():
    hosts = [f"h{i}" for i in range(4)]
    rows = [dict(a=a, b=b, round=0, latency_us=1.0, gbps=1.0, wrong=0, ends_disagree=2 in (a, b))
            for a in range(4) for b in range(a + 1, 4)]
    found = verdicts.of_job(_job("link_matrix", link_matrix.link_result(rows, hosts, 8, 3), hosts))
    assert _by_verdict(found) == {pb.HEALTHY: ["w0", "w1", "w3"], pb.SUSPECT: ["w2"], pb.UNHEALTHY: []}
    assert "disagree with the other end's on 3 of 3 links" in found["w2"].figure


def test_of_equally_disputed_ranks_the_one_claiming_the_faster_figures_is_the_liar():
    """Rank 2 inflates its figures, disputed on 2 of its 3 links (its link with 3 read alike);
    noise split link 0-1 (rank 1's end delayed, slower). Ranks 0, 1 and 2 are each disputed on 2
    of 3: the liar is the one whose end claimed the faster figure in its disputes."""
    hosts = [f"h{i}" for i in range(4)]
    disputed = {(0, 1): (2.0, 1.0), (0, 2): (1.0, 3.0), (1, 2): (1.0, 3.0)}  # (gbps_a, gbps_b)
    rows = [dict(a=a, b=b, round=0, latency_us=1.0, gbps=1.0, wrong=0, ends_disagree=(a, b) in disputed,
                 gbps_a=disputed.get((a, b), (1.0, 1.0))[0], gbps_b=disputed.get((a, b), (1.0, 1.0))[1])
            for a in range(4) for b in range(a + 1, 4)]
    found = verdicts.of_job(_job("link_matrix", link_matrix.link_result(rows, hosts, 8, 3), hosts))
    assert _by_verdict(found) == {pb.HEALTHY: ["w0", "w1", "w3"], pb.SUSPECT: ["w2"], pb.UNHEALTHY: []}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _verdict(v, at):
    return pb.WorkerHealth(verdict=v, check="gpu_check", at=at)


def test_failed_quarantines_with_a_doubling_recheck_and_a_pass_lifts_it():
    clock = Clock()
    book = health.HealthBook(MemoryJobStore(), clock)
    assert book.record({"w1": _verdict(pb.HEALTHY, 1000.0)}) == []
    assert book.record({"w1": _verdict(pb.UNHEALTHY, 1000.0)}) == [("w1", True)]
    assert book.get("w1").recheck_at == 1000.0 + health.RECHECK_MIN_S and book.quarantined("w1")
    assert book.due(1059.0) == [] and book.due(1060.0) == ["w1"]
    gaps = []
    for at in (1060.0, 1200.0, 1500.0, 2000.0, 9000.0, 20000.0, 30000.0):
        assert book.record({"w1": _verdict(pb.UNHEALTHY, at)}) == []  # still quarantined: no change
        gaps.append(book.get("w1").recheck_at - at)
    assert gaps == [120.0, 240.0, 480.0, 960.0, 1920.0, 3600.0, 3600.0]
    assert book.record({"w1": _verdict(pb.HEALTHY, 31000.0)}) == [("w1", False)]
    assert book.get("w1").recheck_at == 0 and book.due(10 ** 9) == []
    assert book.record({"w1": _verdict(pb.UNHEALTHY, 32000.0)}) and book.get("w1").recheck_at == 32060.0


def test_a_pass_of_another_check_does_not_clear_a_failure():
    book = health.HealthBook(MemoryJobStore(), Clock())
    book.record({"w1": _verdict(pb.UNHEALTHY, 1000.0)})  # gpu_check
    assert book.record({"w1": pb.WorkerHealth(verdict=pb.HEALTHY, check="sdc_check", at=1001.0)}) == []
    assert book.get("w1").check == "gpu_check" and book.quarantined("w1")
    book.record({"w1": pb.WorkerHealth(verdict=pb.UNHEALTHY, check="sdc_check", at=1002.0)})
    assert book.get("w1").check == "sdc_check"  # as bad: the newer evidence
    assert book.record({"w1": _verdict(pb.HEALTHY, 1003.0)}) == []  # sdc's failure stands
    assert book.record({"w1": pb.WorkerHealth(verdict=pb.HEALTHY, check="sdc_check", at=1004.0)}) == [("w1", False)]


def test_a_worse_verdict_keeps_what_another_check_still_finds():
    """Telemetry's foreign process must stay in the evidence when the gpu_check then fails the worker."""
    book = health.HealthBook(MemoryJobStore(), Clock())
    book.record({"w1": pb.WorkerHealth(verdict=pb.SUSPECT, check="telemetry", at=1000.0,
                                       figure="foreign_process: foreign process pid 4242 holding 900 MiB")})
    book.record({"w1": _verdict(pb.UNHEALTHY, 1001.0)})  # gpu_check
    h = book.get("w1")
    assert h.check == "gpu_check" and h.also == "telemetry SUSPECT: foreign_process: foreign process pid 4242 holding 900 MiB"
    book.record({"w1": _verdict(pb.UNHEALTHY, 1002.0)})  # its recheck fails again: the finding stands beside it
    assert book.get("w1").also.startswith("telemetry SUSPECT: foreign_process")
    book.record({"w1": _verdict(pb.HEALTHY, 1003.0)})  # it passes: nothing is carried over
    assert book.get("w1").verdict == pb.HEALTHY and book.get("w1").also == ""
    book.record({"w1": pb.WorkerHealth(verdict=pb.HEALTHY, check="telemetry", at=1004.0)})
    book.record({"w1": _verdict(pb.UNHEALTHY, 1005.0)})  # a healthy finding is not evidence
    assert book.get("w1").also == ""


def test_cordon_and_uncordon_by_hand():
    clock = Clock()
    book = health.HealthBook(MemoryJobStore(), clock)
    changes = book.cordon("w2", True)
    h = book.get("w2")
    assert changes == [("w2", True)] and h.cordoned and h.check == "cordon" and h.at == 1000.0
    assert book.record({"w2": _verdict(pb.HEALTHY, 1001.0)}) == []  # a pass does not lift a cordon
    assert book.get("w2").cordoned and book.quarantined("w2")
    assert book.cordon("w2", False) == [("w2", False)]
    book.record({"w3": _verdict(pb.UNHEALTHY, 1000.0)})
    clock.now = 1010.0
    # Uncordon of a worker whose latest verdict failed: its recheck is due now, and it stays out
    # until that recheck passes.
    assert book.cordon("w3", True) == [] and book.cordon("w3", False) == []
    assert book.get("w3").verdict == pb.UNHEALTHY and book.quarantined("w3") and book.due() == ["w3"]
    changes = book.cordon("w3", False, force=True)  # the operator overrides the verdict
    h = book.get("w3")
    assert changes == [("w3", False)] and h.verdict == pb.SUSPECT and "--force" in h.expected
    assert book.due() == [] and book.counts()["SUSPECT"] == 1 and book.counts()["CORDONED"] == 0


def test_verdicts_survive_a_restart(tmp_path):
    store = SqliteJobStore(tmp_path / "jobs.db")
    book = health.HealthBook(store, Clock())
    book.record({"w1": _verdict(pb.UNHEALTHY, 1000.0)})
    book.cordon("w2", True)
    store.close()
    store = SqliteJobStore(tmp_path / "jobs.db")
    try:
        again = health.HealthBook(store, Clock())
        assert again.quarantined_ids() == ["w1", "w2"] and again.get("w1").recheck_at == 1060.0
    finally:
        store.close()




def test_the_recheck_wait_doubles_once_per_recheck_not_once_per_failing_kind():
    book = health.HealthBook(MemoryJobStore(), Clock())
    book.record({"w1": _verdict(pb.UNHEALTHY, 1000.0)})  # a sweep: gpu_check fails ...
    book.record({"w1": pb.WorkerHealth(verdict=pb.UNHEALTHY, check="sdc_check", at=1001.0)})  # ... and sdc_check
    assert book.get("w1").recheck_at == 1000.0 + health.RECHECK_MIN_S  # one wait, not doubled
    book.record({"w1": pb.WorkerHealth(verdict=pb.UNHEALTHY, check="sdc_check", at=1060.0)})  # the recheck
    assert book.get("w1").recheck_at == 1060.0 + 2 * health.RECHECK_MIN_S


def _fleet(n: int, model: str = "H100") -> dict[str, str]:
    return {f"w{i:02d}": model for i in range(n)}


def test_the_circuit_breaker_holds_quarantine_at_its_share_of_a_gpu_model():
    # 30 % of a simulated fleet of 20 H100 and 10 A100 workers fails one check: automatic
    # quarantine takes 10 % of each model (at least one), the rest stay in service, recorded.
    book = health.HealthBook(MemoryJobStore(), Clock(), max_share=0.10)
    models = {**_fleet(20, "H100"), **{f"a{i:02d}": "A100" for i in range(10)}}
    failing = [f"w{i:02d}" for i in range(6)] + ["a00", "a01", "a02"]
    changes = book.record({w: _verdict(pb.UNHEALTHY, 1000.0) for w in failing}, models)
    assert changes == [("a00", True), ("w00", True), ("w01", True)]
    assert book.quarantined_ids() == ["a00", "w00", "w01"]
    assert book.held_ids() == ["a01", "a02", "w02", "w03", "w04", "w05"]
    assert all(book.get(w).verdict == pb.UNHEALTHY for w in failing)  # the verdicts stay recorded
    assert book.counts()["BREAKER_HELD"] == 6
    # A recheck of a held worker does not slip it past the breaker; an operator may cordon it.
    assert book.record({"w02": _verdict(pb.UNHEALTHY, 1060.0)}, models) == []
    assert book.cordon("w02", True) == [("w02", True)] and "w02" not in book.held_ids()
    # When a quarantined worker passes, the breaker has room again for the next verdict.
    assert book.record({"w00": _verdict(pb.HEALTHY, 1100.0)}, models) == [("w00", False)]
    assert book.record({"w03": _verdict(pb.UNHEALTHY, 1200.0)}, models) == []  # w01 + cordoned w02
    assert book.cordon("w02", False, force=True) == [("w02", False)]
    assert book.record({"w03": _verdict(pb.UNHEALTHY, 1300.0)}, models) == [("w03", True)]


def test_a_small_fleet_may_always_quarantine_one_worker_and_a_bad_share_is_refused():
    book = health.HealthBook(MemoryJobStore(), Clock(), max_share=0.10)
    assert book.record({"w00": _verdict(pb.UNHEALTHY, 1000.0)}, _fleet(3)) == [("w00", True)]
    assert book.record({"w01": _verdict(pb.UNHEALTHY, 1000.0)}, _fleet(3)) == []
    with pytest.raises(ValueError, match="quarantine_max_share"):
        health.HealthBook(MemoryJobStore(), Clock(), max_share=1.5)


def test_a_receiver_that_accuses_every_sender_whom_all_others_received_intact_is_failed():
    """Its own report (wrong data from each of the other three) against each sender's other
    receivers' own reports (intact): the fault is on its side, its receive path or its word. One
    accused sender only stays a lone accusation: suspect."""
    hosts = ["a", "b", "c", "d"]
    forger = sdc_result([("m", "aa", 0, [0, 999, 999, 999])] + [("m", "aa", 0, [0] * 4)] * 3)
    found = verdicts.of_job(_job("sdc_check", forger, hosts))
    assert _by_verdict(found) == {pb.HEALTHY: ["w1", "w2", "w3"], pb.SUSPECT: [], pb.UNHEALTHY: ["w0"]}
    assert "received wrong data from all 3 senders" in found["w0"].figure
    three = sdc_result([("m", "aa", 0, [0, 9, 9])] + [("m", "aa", 0, [0] * 3)] * 2)
    assert _by_verdict(verdicts.of_job(_job("sdc_check", three, hosts[:3])))[pb.UNHEALTHY] == ["w0"]
    pair = sdc_result([("m", "aa", 0, [0, 9]), ("m", "aa", 0, [0, 0])])  # two ranks: nobody clears the sender
    assert _by_verdict(verdicts.of_job(_job("sdc_check", pair, hosts[:2])))[pb.UNHEALTHY] == []
