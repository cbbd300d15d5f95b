"""Crashes are evidence: a rank's own failure report becomes a verdict on its worker, with the
cause and the peers; a repeat offender is kept out until a check passes (coordinator/health/crashes.py
through the control core)."""

from __future__ import annotations

from coordinator.shell.facade import Coordinator, Timings
from coordinator.health import crashes
from coordinator.store.memory import MemoryJobStore
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from test_facade import Worker, spec
from test_health_reactor import placed, start_check

SEGV = "executor process killed by signal 11"


def fleet(n: int):
    core = Coordinator(MemoryJobStore(), Timings(heartbeat_timeout_s=30, blame_grace_s=3))
    return core, [Worker(core, f"w{i}", i) for i in range(n)]


def crash_on(core, ws, members: list[str], culprit: str, failure=wpb.EXECUTOR_DIED, error=SEGV) -> str:
    """A job placed on exactly `members`, whose `culprit` rank reports its own failure."""
    job = core.submit(spec(len(members), worker_ids=members)).id
    assert core.get(job).state == pb.RUNNING
    by_id = {w.id: w for w in ws}
    for w in ws:
        w.inbox()
    rank = placed(core, job).index(culprit)
    by_id[culprit].done(job, rank, ok=False, failure=failure, error=error)
    assert core.get(job).state == pb.FAILED
    for r, wid in enumerate(placed(core, job)):  # the others were aborted: they say so
        if wid != culprit:
            by_id[wid].done(job, r, ok=False, failure=wpb.ABORTED, error="aborted")
    return job


def test_a_crash_makes_its_own_worker_suspect_with_the_signal_and_the_peers_and_no_one_else():
    core, ws = fleet(3)
    job = crash_on(core, ws, ["w0", "w1", "w2"], "w1")
    h = core.fleet.book.get("w1")
    assert (h.verdict, h.check, h.job_id) == (pb.SUSPECT, "crash", job)
    assert "signal 11" in h.figure and "with w0, w2" in h.figure
    assert core.fleet.book.get("w0").verdict == core.fleet.book.get("w2").verdict == pb.VERDICT_UNSPECIFIED
    assert not core.fleet.book.quarantined("w1")


def test_a_peer_error_blames_nobody():
    core, ws = fleet(2)
    job = core.submit(spec(2)).id
    ws[0].done(job, 0, ok=False, failure=wpb.PEER_ERROR, error="Connection reset by peer")
    assert core.fleet.book.get("w0").verdict == core.fleet.book.get("w1").verdict == pb.VERDICT_UNSPECIFIED


def test_failures_with_one_peer_point_at_the_link_or_the_peer():
    core, ws = fleet(2)
    for _ in range(3):
        crash_on(core, ws, ["w0", "w1"], "w0")
    h = core.fleet.book.get("w0")
    assert h.verdict == pb.SUSPECT and "same peers (w1)" in h.expected and "link" in h.expected
    assert not core.fleet.book.quarantined("w0")


def test_a_repeat_offender_is_kept_out_until_a_check_passes():
    core, ws = fleet(4)
    for peers in (["w1"], ["w2"], ["w3"]):
        crash_on(core, ws, ["w0", *peers], "w0")
    h = core.fleet.book.get("w0")
    assert h.verdict == pb.UNHEALTHY and "repeat offender" in h.expected
    assert core.fleet.book.quarantined("w0")
    job = core.submit(spec(4)).id  # every worker but the offender is free: it waits
    assert core.get(job).state == pb.QUEUED and "1 quarantined" in core.get(job).reason
    core.cancel(job)
    for w in ws:
        w.inbox()
    check_id, evidence = start_check(core, ws, bad=set())
    for rank in reversed(range(4)):
        ws[rank].done(check_id, rank, **evidence[rank])
    assert core.fleet.book.get("w0").verdict == pb.HEALTHY and not core.fleet.book.quarantined("w0")


def test_rank_errors_make_a_worker_suspect_but_never_a_repeat_offender():
    core, ws = fleet(4)
    for peers in (["w1"], ["w2"], ["w3"]):
        crash_on(core, ws, ["w0", *peers], "w0", failure=wpb.RANK_ERROR, error="RuntimeError: CUDA error")
    assert core.fleet.book.get("w0").verdict == pb.SUSPECT


def test_crashes_older_than_the_window_are_forgotten():
    log = crashes.CrashLog()
    for i, peer in enumerate(["a", "b"]):
        log.add("w", wpb.EXECUTOR_DIED, SEGV, f"j{i}", ["w", peer], now=0.0)
    found = log.add("w", wpb.EXECUTOR_DIED, SEGV, "j2", ["w", "c"], now=crashes.WINDOW_S + 1)
    assert found.verdict == pb.SUSPECT and len(log.recent("w")) == 1
    assert log.add("w", wpb.ABORTED, "aborted", "j3", ["w", "c"], now=crashes.WINDOW_S + 2) is None


def test_check_never_sums_a_failed_check_job_up_as_healthy():
    from ringleader_app.check_cmds import check_text, unfinished

    healthy = pb.WorkerHealth(verdict=pb.HEALTHY, check="gpu_check", job_id="older")
    failed = pb.Job(id="c1", state=pb.FAILED, reason="rank 0 (worker g0) failed: executor process killed by signal 11",
                    spec=pb.JobSpec(world_size=2, gpu_check=pb.GpuCheckSpec()),
                    workers=[pb.WorkerRef(worker_id="g0", rank=0), pb.WorkerRef(worker_id="g1", rank=1)])
    answer = pb.RunCheckResponse(jobs=[failed], workers=[pb.WorkerInfo(worker_id=w, health=healthy) for w in ("g0", "g1")])
    assert unfinished(answer) == [failed]
    text = check_text(answer)
    assert "0 of 2 workers healthy" in text and "2 not judged" in text
    assert "check job c1 (gpu_check) FAILED on g0, g1: rank 0 (worker g0) failed: executor process killed by signal 11" in text
    ok = pb.RunCheckResponse(jobs=[pb.Job(id="c2", state=pb.SUCCEEDED, spec=failed.spec, workers=failed.workers)],
                             workers=answer.workers)
    assert unfinished(ok) == [] and "2 of 2 workers healthy" in check_text(ok)


def test_a_repeat_offender_is_rechecked_with_the_corruption_checks_collectives():
    from coordinator.health import recheck, sweeper

    def w(wid, verdict=pb.HEALTHY, check="gpu_check", state=pb.IDLE):
        return pb.WorkerInfo(worker_id=wid, host="h0", backend="gloo", state=state, device=pb.Device(name="cpu"),
                             health=pb.WorkerHealth(verdict=verdict, check=check))
    fleet = [w("a", pb.UNHEALTHY, "crash", pb.QUARANTINED), w("b"), w("c")]
    (spec,) = recheck.plan(fleet, ["a", "gone"], sweeper.short)
    assert spec.WhichOneof("kind") == "sdc_check" and sorted(spec.placement.worker_ids) == ["a", "b", "c"]
