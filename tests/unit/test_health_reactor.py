"""Fleet health as state of the control core, through the facade in process (no servers; the test
plays the worker daemons): a check's verdicts are applied in the input that ends it, so that
input's placement pass already keeps the failed worker out; a check holds its gang until its
verdicts exist; nothing re-enters `Control.handle`; one fact per worker's quarantine."""

from __future__ import annotations

import pytest

from coordinator.core.reentry import ReentryError
from coordinator.shell.facade import Coordinator, Timings
from coordinator.store.memory import MemoryJobStore
from ringleader import checks
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from test_facade import Worker, run_new_group, spec


@pytest.fixture
def core():
    return Coordinator(MemoryJobStore(), Timings(heartbeat_timeout_s=30, blame_grace_s=3))


def gpu_check(ids: list[str]) -> pb.JobSpec:
    return pb.JobSpec(world_size=len(ids), priority=checks.CHECK_PRIORITY, name="check gpu_check",
                      placement=pb.Placement(worker_ids=ids), gpu_check=pb.GpuCheckSpec(iters=2))


def gpu_evidence(ids: list[str], bad: set[str]) -> list[dict]:
    """What each rank sends with its JobDone: its own figures, `bad` ones at a tenth of the
    others' product rate (one turn each, short enough for the figures to explain)."""
    return [{"h49e_gpu": wpb.H49eGpuEvidence(device="cpu", tflops=0.1 if w in bad else 1.0, copy_gbps=10,
                                             seen_s=[0.05], series=1)} for w in ids]


def start_check(core, ws: list[Worker], bad: set[str]) -> tuple[str, list[dict]]:
    """A gpu_check on `ws`, formed (every rank assigned); returns its id and each rank's evidence."""
    ids = [w.id for w in ws]
    job = core.submit(gpu_check(ids))
    (kind, a0), = ws[0].inbox()
    assert kind == "assignment"
    ws[0].send(store_ready=wpb.StoreReady(job_id=job.id, group_key=a0.group_key, store_port=4242))
    for w in ws[1:]:
        assert w.kinds() == ["assignment"]
    return job.id, gpu_evidence(ids, bad)


def placed(core, job_id: str) -> list[str]:
    return [w.worker_id for w in sorted(core.get(job_id).workers, key=lambda w: w.rank)]


def test_a_verdict_quarantines_in_the_input_that_ends_the_check_and_its_pass_places_the_queue(core):
    ws = [Worker(core, f"w{i}", i) for i in range(3)]
    check_id, result = start_check(core, ws, bad={"w1"})
    a = core.submit(spec(2)).id
    b = core.submit(spec(1)).id
    ws[1].done(check_id, 1, **result[1])
    ws[2].done(check_id, 2, **result[2])
    # The check holds its gang until its verdicts exist: nothing is placed on w1 or w2 yet.
    assert [ws[1].state, ws[2].state] == [pb.BUSY, pb.BUSY]
    assert core.get(a).state == pb.QUEUED and core.get(b).state == pb.QUEUED
    ws[0].done(check_id, 0, **result[0])  # the rank that ends the check reports last
    # In that same input: the verdict, w1 out of user jobs, A placed on the others.
    assert core.get(check_id).state == pb.SUCCEEDED
    assert core.fleet.book.get("w1").verdict == pb.UNHEALTHY and core.fleet.book.quarantined("w1")
    assert core.get(a).state == pb.RUNNING and placed(core, a) == ["w0", "w2"]
    listed = {w.worker_id: w.state for w in core.list_workers().workers}
    assert listed == {"w0": pb.BUSY, "w1": pb.QUARANTINED, "w2": pb.BUSY}
    assert core.get(b).state == pb.QUEUED
    # B waits for a worker user jobs may use; once A ends, it is placed, never on w1.
    run_new_group(core, [ws[0], ws[2]], a)
    assert core.get(b).state == pb.RUNNING and placed(core, b) != ["w1"]


def test_a_verdict_that_arrives_while_every_other_worker_is_busy(core):
    ws = [Worker(core, f"w{i}", i) for i in range(4)]
    busy = core.submit(spec(1, worker_ids=["w3"])).id  # w3 runs a user job throughout
    assert ws[3].kinds() == ["assignment"]
    check_id, result = start_check(core, ws[:3], bad={"w1"})
    a = core.submit(spec(2)).id
    b = core.submit(spec(1)).id
    ws[1].done(check_id, 1, **result[1])
    ws[2].done(check_id, 2, **result[2])
    ws[0].done(check_id, 0, **result[0])
    assert core.get(a).state == pb.RUNNING and set(placed(core, a)) == {"w0", "w2"}
    assert core.get(b).state == pb.QUEUED and ws[1].state == pb.IDLE and core.fleet.book.quarantined("w1")
    ws[3].done(busy, 0)
    assert core.get(b).state == pb.RUNNING and placed(core, b) == ["w3"]


def test_a_listener_hears_after_the_input_so_its_call_is_an_input_of_its_own_and_re_entry_raises(core):
    ws = [Worker(core, f"w{i}", i) for i in range(2)]
    seen = []

    def calls_back_in(event, job):  # a listener that calls into the coordinator: after the input
        if event.WhichOneof("event") == "state" and event.state.state == pb.SUCCEEDED:
            try:
                core.cordon("w2", True)
            except ReentryError as exc:
                seen.append(str(exc))

    core.add_listener(calls_back_in)
    first = core.submit(spec(2)).id
    second = core.submit(spec(2)).id
    Worker(core, "w2", 2)  # joins once both jobs are placed or queued on w0 and w1
    run_new_group(core, ws, first)  # the last rank's report ends `first` and starts `second`
    assert seen == []  # the listener was told once the input was applied: no re-entry
    assert core.get(second).state == pb.RUNNING
    assert core.fleet.book.quarantined("w2")  # the listener's call applied, as an input of its own
    with pytest.raises(ReentryError):
        core.control._guard.applying = "Tick"  # as inside handle
        try:
            core.cordon("w0", True)
        finally:
            core.control._guard.applying = None


def test_cordon_is_an_input_and_quarantine_has_one_home(core):
    ws = [Worker(core, f"w{i}", i) for i in range(3)]
    info = core.cordon("w2", True)
    assert info.state == pb.QUARANTINED and info.health.cordoned
    assert not hasattr(ws[2].conn, "quarantined") and not hasattr(core.control, "quarantined")
    job = core.submit(spec(2)).id
    assert placed(core, job) == ["w0", "w1"]
    named = core.submit(spec(1, worker_ids=["w2"])).id  # a job naming it runs there (diagnosis)
    assert placed(core, named) == ["w2"] and ws[2].state == pb.BUSY
    ws[2].inbox()
    ws[2].done(named, 0)
    assert [w.state for w in core.list_workers(states=[pb.QUARANTINED]).workers] == [pb.QUARANTINED]
    back = core.cordon("w2", False)
    assert back.state == pb.IDLE and not back.health.cordoned
    with pytest.raises(Exception, match="worker nobody not found"):
        core.cordon("nobody", True)


def test_quarantine_holds_across_a_reconnect_and_a_restart():
    store = MemoryJobStore()
    core = Coordinator(store)
    w = Worker(core, "w0")
    core.cordon("w0", True)
    core.disconnect(w.conn, "test")
    again = Worker(core, "w0")
    assert core.list_workers().workers[0].state == pb.QUARANTINED
    restarted = Coordinator(store)  # a new coordinator over the same store
    Worker(restarted, "w0")
    assert restarted.list_workers().workers[0].state == pb.QUARANTINED
    assert again.state == pb.IDLE  # the connection's own state: the listing derives QUARANTINED


def sdc_evidence(ids: list[str], bad: set[str]) -> list[dict]:
    """Each rank's own corruption-check evidence: `bad` ones with another checksum."""
    return [{"h49e_sdc": wpb.H49eSdcEvidence(device="cpu", checksum="cd" * 8 if w in bad else "ab" * 8,
                                             wrong_from=[0] * len(ids))} for w in ids]


def finish_check(core, by_id: dict[str, Worker], bad: set[str] = frozenset()) -> tuple[str, str, list[str]]:
    """Play the check job that was just assigned (to whichever workers got it): form its group,
    finish every rank (rank 0 last; `bad` ones with failing figures); returns (its kind, id, gang)."""
    got = {w.id: dict(w.inbox()) for w in by_id.values()}
    (a0,) = [m["assignment"] for m in got.values() if "assignment" in m]  # a new group: rank 0 first
    kind, ids = a0.spec.WhichOneof("kind"), placed(core, a0.job_id)
    by_id[ids[0]].send(store_ready=wpb.StoreReady(job_id=a0.job_id, group_key=a0.group_key, store_port=4242))
    for wid in ids[1:]:
        by_id[wid].inbox()
    for rank, wid in reversed(list(enumerate(ids))):
        evidence = (gpu_evidence if kind == "gpu_check" else sdc_evidence)(ids, set(bad))
        by_id[wid].done(a0.job_id, rank, **evidence[rank])
    return kind, a0.job_id, ids


def test_preflight_with_every_candidate_busy_at_submission_certifies_the_gang_and_replaces_a_failure(core):
    ws = {f"w{i}": Worker(core, f"w{i}", i) for i in range(4)}
    busy = core.submit(spec(4)).id  # every worker busy when the preflight job comes
    job = core.submit(pb.JobSpec(world_size=2, preflight=True,
                                 collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))).id
    assert core.get(job).state == pb.QUEUED
    run_new_group(core, list(ws.values()), busy)
    # Its gang is picked now, and checked before the job starts: the job waits, saying so.
    assert core.get(job).state == pb.QUEUED and core.get(job).reason.startswith("preflight: checking its gang")
    assert finish_check(core, ws, bad={"w1"})[::2] == ("gpu_check", ["w0", "w1"])
    assert core.fleet.book.quarantined("w1")
    # w1 failed: another worker replaces it, and the new gang is checked (w0 again: not certified
    # by every preflight kind yet).
    kind, _, gang = finish_check(core, ws)
    assert (kind, gang) == ("gpu_check", ["w0", "w2"]) and core.get(job).state == pb.QUEUED
    kind, _, gang = finish_check(core, ws)
    assert (kind, gang) == ("sdc_check", ["w0", "w2"])
    assert core.get(job).state == pb.RUNNING and placed(core, job) == ["w0", "w2"]
    # The next preflight job on certified workers starts at once, with no check.
    run_new_group(core, [ws["w0"], ws["w2"]], job)
    again = core.submit(pb.JobSpec(world_size=2, preflight=True, placement=pb.Placement(worker_ids=["w0", "w2"]),
                                   collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))).id
    assert core.get(again).state == pb.RUNNING


def test_preflight_of_a_named_worker_that_fails_fails_the_job_naming_it(core):
    ws = {f"w{i}": Worker(core, f"w{i}", i) for i in range(2)}
    job = core.submit(pb.JobSpec(world_size=2, preflight=True, placement=pb.Placement(worker_ids=["w0", "w1"]),
                                 collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))).id
    finish_check(core, ws, bad={"w1"})
    done = core.get(job)
    assert done.state == pb.FAILED and done.reason.startswith("preflight: worker w1 failed gpu_check")
    assert [w.state for w in ws.values()] == [pb.IDLE, pb.IDLE]


def test_a_preflight_job_cancelled_while_its_gang_is_checked_frees_the_gang(core):
    ws = {f"w{i}": Worker(core, f"w{i}", i) for i in range(2)}
    job = core.submit(pb.JobSpec(world_size=2, preflight=True,
                                 collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))).id
    core.cancel(job)
    finish_check(core, ws)  # the check that was running ends as checks do
    assert core.get(job).state == pb.CANCELLED and [w.state for w in ws.values()] == [pb.IDLE, pb.IDLE]
    assert core.fleet.book.certified("w0", ("gpu_check",), 0.0)


def test_submit_counts_the_quarantined_apart_and_accepts_a_job_naming_one():
    from ringleader import jobspec
    from ringleader.fleet_fit import shortfall

    def info(wid, state):
        return pb.WorkerInfo(worker_id=wid, state=state, backend="gloo", device=pb.Device(type="cpu", name="cpu"))

    fleet = [info(f"w{i}", pb.IDLE) for i in range(5)] + [info("w5", pb.QUARANTINED)]
    six = jobspec.normalize(spec(6))
    assert shortfall(six, fleet) == "needs 6 workers: 6 connected, 5 idle, 0 busy, 1 quarantined"
    assert shortfall(jobspec.normalize(spec(2, worker_ids=["w5", "w0"])), fleet) == ""


def test_the_circuit_breaker_holds_automatic_quarantine_at_its_share_through_the_reactor():
    from coordinator.edge.fleet_metrics import FleetHealthCollector

    core = Coordinator(MemoryJobStore(), quarantine_max_share=0.1)
    ws = [Worker(core, f"w{i}", i) for i in range(10)]
    bad = {"w2", "w5", "w8"}  # 30 % of the fleet fails one check
    check_id, result = start_check(core, ws, bad=bad)
    for rank in reversed(range(10)):
        ws[rank].done(check_id, rank, **result[rank])
    book = core.fleet.book
    assert all(book.get(w).verdict == pb.UNHEALTHY for w in bad)  # every verdict recorded
    assert book.quarantined_ids() == ["w2"] and book.held_ids() == ["w5", "w8"]
    assert len(core.alerts) == 1 and "w5, w8" in core.alerts[0] and "circuit breaker" in core.alerts[0]
    # Held workers stay in user jobs until an operator decides.
    job = core.submit(spec(9)).id
    assert set(placed(core, job)) == {f"w{i}" for i in range(10)} - {"w2"}
    metrics = {f.name: f.samples[0].value for f in FleetHealthCollector(core.fleet).collect() if len(f.samples) == 1}
    assert metrics == {"ringleader_workers_quarantined": 1.0, "ringleader_quarantine_breaker_held": 2.0}
    info = core.cordon("w5", True)  # the operator decides
    assert info.health.cordoned and book.quarantined_ids() == ["w2", "w5"] and book.held_ids() == ["w8"]


def test_a_preflight_gang_keeps_the_group_its_first_check_formed(core):
    ws = [Worker(core, f"w{i}", i) for i in range(2)]
    job = core.submit(pb.JobSpec(world_size=2, preflight=True,
                                 collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))).id
    ids = [w.id for w in ws]
    (kind, gpu), = ws[0].inbox()
    key = gpu.group_key
    ws[0].send(store_ready=wpb.StoreReady(job_id=gpu.job_id, group_key=key, store_port=4242))
    ws[1].inbox()
    for rank, w in reversed(list(enumerate(ws))):  # every rank reports holding the group it formed
        w.done(gpu.job_id, rank, holds=key, **gpu_evidence(ids, set())[rank])
    # The next check, and then the job, go to every rank at once on that group: no new rendezvous.
    (sdc0,), (sdc1,) = ([m for k, m in w.inbox() if k == "assignment"] for w in ws)
    assert sdc0.spec.HasField("sdc_check") and sdc0.group_key == sdc1.group_key == key
    for rank, w in reversed(list(enumerate(ws))):
        w.done(sdc0.job_id, rank, holds=key, **sdc_evidence(ids, set())[rank])
    assert core.get(job).state == pb.RUNNING and core.get(job).warm_start


def test_a_preflight_whose_gang_stays_suspect_fails_after_its_rounds_instead_of_looping(core):
    ws = {f"w{i}": Worker(core, f"w{i}", i) for i in range(2)}
    job = core.submit(pb.JobSpec(world_size=2, preflight=True,
                                 collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))).id
    for _ in range(3):
        assert finish_check(core, ws)[0] == "gpu_check"
        # Two checksums that disagree, no majority: both suspect, neither failed nor certified.
        got = {w.id: dict(w.inbox()) for w in ws.values()}
        (a0,) = [m["assignment"] for m in got.values() if "assignment" in m]
        ws["w0"].send(store_ready=wpb.StoreReady(job_id=a0.job_id, group_key=a0.group_key, store_port=1))
        ws["w1"].inbox()
        ws["w1"].done(a0.job_id, 1, h49e_sdc=wpb.H49eSdcEvidence(device="cpu", checksum="bb", wrong_from=[0, 0]))
        ws["w0"].done(a0.job_id, 0, h49e_sdc=wpb.H49eSdcEvidence(device="cpu", checksum="aa", wrong_from=[0, 0]))
        assert core.fleet.book.get("w0").verdict == pb.SUSPECT
    done = core.get(job)
    assert done.state == pb.FAILED and "not certified 3 times" in done.reason and "suspect" in done.reason
    assert [w.state for w in ws.values()] == [pb.IDLE, pb.IDLE]


def test_a_checks_result_is_assembled_by_the_coordinator_and_rank_0s_outcome_is_not_read(core):
    """Rank 0 sends a forged outcome (its peers flagged, wrong worker ids) beside its own evidence:
    the stored result is built from every rank's own evidence, names each row's worker by its
    rank as placed, and the forgery frames nobody."""
    ws = [Worker(core, f"w{i}", i) for i in range(3)]
    check_id, evidence = start_check(core, ws, bad=set())
    forged = pb.GpuCheckResult(matmul_n=64, dtype="float32", workers=[
        pb.GpuFigures(rank=r, worker_id=w, device="cpu", tflops=0.01, copy_gbps=10, flagged=True)
        for r, w in enumerate(("", "w0", "zz"))])
    for rank in (1, 2, 0):
        ws[rank].done(check_id, rank, **evidence[rank], **({"gpu_check": forged} if rank == 0 else {}))
    job = core.get(check_id)
    assert job.state == pb.SUCCEEDED
    assert [(w.rank, w.worker_id, w.tflops) for w in job.gpu_check.workers] == [(0, "w0", 1.0), (1, "w1", 1.0),
                                                                                (2, "w2", 1.0)]
    assert [core.fleet.book.get(w.id).verdict for w in ws] == [pb.HEALTHY] * 3


def test_a_rank_without_evidence_or_claiming_another_model_is_suspect_never_healthy(core):
    """No rank is judged on another's word: one that reports no figures of its own is suspect;
    so is one whose executor names a device model its registration does not (its figures are
    compared under the registered model)."""
    ws = [Worker(core, f"w{i}", i) for i in range(4)]
    check_id, evidence = start_check(core, ws, bad=set())
    evidence[1] = {}
    evidence[2]["h49e_gpu"].device = "H200"
    for rank in (1, 2, 3, 0):
        ws[rank].done(check_id, rank, **evidence[rank])
    job = core.get(check_id)
    assert job.state == pb.SUCCEEDED
    assert {(g.rank, g.reason.split(":")[0]) for g in job.gpu_check.h49e_gaps} == {
        (1, "no evidence"), (2, "its executor reported a 'H200' device, its registration a 'cpu'")}
    got = {w.id: core.fleet.book.get(w.id).verdict for w in ws}
    assert got == {"w0": pb.HEALTHY, "w1": pb.SUSPECT, "w2": pb.SUSPECT, "w3": pb.HEALTHY}
    assert [w.device for w in job.gpu_check.workers] == ["cpu"] * 3  # rank 1 has no row; rank 2 under "cpu"


def test_observe_mode_records_and_alerts_a_failed_verdict_but_quarantines_nothing():
    from coordinator.edge.fleet_metrics import FleetHealthCollector

    core = Coordinator(MemoryJobStore(), health_observe=True)
    ws = [Worker(core, f"w{i}", i) for i in range(4)]
    check_id, evidence = start_check(core, ws, bad={"w2"})
    for rank in reversed(range(4)):
        ws[rank].done(check_id, rank, **evidence[rank])
    book = core.fleet.book
    assert book.get("w2").verdict == pb.UNHEALTHY  # the verdict, with its evidence, as ever
    assert book.quarantined_ids() == [] and not book.quarantined("w2") and book.held_ids() == []
    assert [a for a in core.alerts if "w2" in a and "observe mode" in a]
    listed = {w.worker_id: w for w in core.list_workers().workers}
    assert listed["w2"].state == pb.IDLE and listed["w2"].health.observe_only
    assert not listed["w0"].health.observe_only  # a healthy verdict is nothing to observe
    job = core.submit(spec(4)).id
    assert set(placed(core, job)) == {"w0", "w1", "w2", "w3"}  # the failed worker stays in user jobs
    metrics = {(f.name, tuple(s.labels.values())): s.value for f in FleetHealthCollector(core.fleet).collect()
               for s in f.samples}
    assert metrics[("ringleader_worker_verdicts", ("unhealthy",))] == 1
    assert metrics[("ringleader_workers_quarantined", ())] == 0


def test_observe_mode_keeps_a_cordon_by_hand():
    core = Coordinator(MemoryJobStore(), health_observe=True)
    ws = [Worker(core, f"w{i}", i) for i in range(2)]
    core.cordon("w1", True)
    assert core.fleet.book.quarantined_ids() == ["w1"] and ws[1].state == pb.IDLE


def test_the_odd_worker_is_listed_with_its_setting_before_any_job_and_a_gang_never_mixes_it():
    from coordinator.edge.fleet_metrics import FleetHealthCollector

    core = Coordinator(MemoryJobStore())

    def fingerprint(**settings):
        return pb.ConfigFingerprint(software={"torch": "2.5.1", "ringleader": "t"}, settings=settings)
    ws = [Worker(core, f"w{i}", i, fingerprint=fingerprint(**({"NCCL_PROTO": "LL"} if i == 2 else {})))
          for i in range(3)]
    listed = {w.worker_id: w for w in core.list_workers().workers}
    assert listed["w2"].config_drift == "NCCL_PROTO=LL (2 others: unset)"
    assert listed["w2"].fingerprint.settings["NCCL_PROTO"] == "LL"
    assert listed["w0"].config_drift == listed["w1"].config_drift == ""
    drift = {s.labels["part"]: s.value for f in FleetHealthCollector(core.fleet).collect()
             if f.name == "ringleader_worker_config_drift" for s in f.samples}
    assert drift == {"software": 0, "topology": 0, "settings": 1}
    three = core.submit(spec(3)).id
    assert core.get(three).state == pb.QUEUED
    assert "w2 differs (NCCL_PROTO=LL vs unset)" in core.get(three).reason
    assert all(k != "assignment" for w in ws for k in w.kinds())
    core.cancel(three)
    two = core.submit(spec(2)).id
    assert set(placed(core, two)) == {"w0", "w1"}


def test_observe_mode_taints_no_node_even_when_asked_to():
    from ringleader_app.process import CoordinatorConfig, RunningCoordinator

    rc = RunningCoordinator(CoordinatorConfig(db=":memory:", http_address="", k8s_taint_nodes=True, health_observe=True))
    try:
        assert rc.tainter is None and rc.core.fleet.book.observe
    finally:
        rc.store.close()


def test_observe_mode_runs_a_preflight_job_after_its_checks_whatever_they_found():
    core = Coordinator(MemoryJobStore(), Timings(heartbeat_timeout_s=30, blame_grace_s=3), health_observe=True)
    ws = {f"w{i}": Worker(core, f"w{i}", i) for i in range(2)}
    job = core.submit(pb.JobSpec(world_size=2, preflight=True, placement=pb.Placement(worker_ids=["w0", "w1"]),
                                 collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))).id
    finish_check(core, ws, bad={"w1"})
    assert core.fleet.book.get("w1").verdict == pb.UNHEALTHY
    finish_check(core, ws)  # the next preflight kind
    assert core.get(job).state == pb.RUNNING and placed(core, job) == ["w0", "w1"]


def _gpu_worker(core, worker_id: str, host: str, index: int) -> Worker:
    """A GPU worker daemon played by the test: registered as cuda:`index` on `host`."""
    w = Worker.__new__(Worker)
    w.core, w.id = core, worker_id
    w.conn = core.register(wpb.Register(
        worker_id=worker_id, host=host, address=f"10.1.0.{index + 1}", backend="nccl", version="test",
        device=pb.Device(type="cuda", index=index, name="NVIDIA H200", memory_bytes=1 << 37)))
    assert w.conn.outbox.get_nowait().WhichOneof("msg") == "registered"
    return w


def _beat(w: Worker, foreign: tuple[int, ...] = (), own: tuple[int, ...] = ()) -> pb.WorkerHealth:
    """`w` heartbeats with these processes on its GPU (others', its own); returns its health after."""
    t = wpb.GpuTelemetry(at=1.0, own_pids=own, foreign=[wpb.ForeignProcess(pid=p, used_bytes=600 << 20) for p in foreign])
    w.send(heartbeat=wpb.Heartbeat(executor=pb.EXECUTOR_OK, telemetry=t))
    return w.core.control.health.get(w.id)


def test_a_co_tenants_executor_on_a_shared_gpu_is_not_a_foreign_process_but_a_stranger_still_is(core):
    """The shared-GPU fleet: two workers registered on one host's cuda:0 each see the other's
    executor on the GPU. The process its co-tenant lists as its own is excused; one it does not
    list, one on another GPU, or one a worker of another host claims, stays foreign (SUSPECT)."""
    g0, g1 = _gpu_worker(core, "g0", "h1", 0), _gpu_worker(core, "g1", "h1", 0)
    g2, far = _gpu_worker(core, "g2", "h1", 1), _gpu_worker(core, "far", "h2", 0)
    # Before g1 has said which processes are its own, g0 sees a stranger: suspect at once.
    assert _beat(g0, foreign=(684,)).verdict == pb.SUSPECT
    assert _beat(g1, foreign=(649,), own=(684,)).verdict == pb.SUSPECT
    assert _beat(g0, foreign=(684,), own=(649,)).verdict == pb.HEALTHY  # g1's word now excuses it
    assert _beat(g1, foreign=(649,), own=(684,)).verdict == pb.HEALTHY
    h = _beat(g0, foreign=(684, 999), own=(649,))  # a stranger beside the co-tenant
    assert h.verdict == pb.SUSPECT and "pid 999" in h.figure and "pid 684" not in h.figure
    _beat(far, own=(999,))  # another host's word about the stranger: not a co-tenant's
    assert _beat(g0, foreign=(684, 999), own=(649,)).verdict == pb.SUSPECT
    h = _beat(g2, foreign=(684,))  # g1's executor on cuda:1 is not g1's to explain there
    assert h.verdict == pb.SUSPECT and "pid 684" in h.figure
    g1.conn.transition(pb.DISCONNECTED)  # a co-tenant gone says nothing for anyone
    assert _beat(g0, foreign=(684,), own=(649,)).verdict == pb.SUSPECT
