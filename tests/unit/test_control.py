"""The control core as a reactor: each test feeds `Control.handle` a list of inputs and checks the
list of sends (and the state it leaves). No servers, no threads, no event loop; the clock is
given by the Tick inputs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coordinator.core import liveness, writes
from coordinator.core.clock import Now
from coordinator.core.control import Control
from coordinator.core.reentry import ReentryError
from coordinator.core.inputs import (CLOSE, Cancel, Disconnect, Out, Place, Register, Reload, Cordon, Submit, Tick,
                                     WorkerMsg)
from coordinator.core.liveness import Timings
from coordinator.store.memory import MemoryJobStore
from ringleader import checks, jobspec
from ringleader.errors import NotFound
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

ROOT = Path(__file__).resolve().parents[2]


def sends(out: Out) -> list[tuple[str, str]]:
    """(worker id, message kind) for each send, in order; "close" ends a stream."""
    return [(c.worker_id, "close" if m is CLOSE else m.WhichOneof("msg")) for c, m in out.sends]


class Placing:
    """A Control driven as the facade drives it with a pass per input: each input, then the
    placement pass its Out asks for (`Place`), one Out for both."""

    def __init__(self, control: Control) -> None:
        self.control = control

    def handle(self, inp) -> Out:
        out = self.control.handle(inp, Now.read())
        return self.alone(Place(), out) if out.place else self.applied(out)

    def alone(self, inp, before: Out | None = None) -> Out:
        """One input with no placement pass after it (a Place is one), its writes applied."""
        out = self.control.handle(inp, Now.read())
        return self.applied(before.then(out) if before is not None else out)

    def applied(self, out: Out) -> Out:
        writes.apply(out.writes, self.control.store.store)  # as the facade does, before it sends
        self.control.events.tell(out.events)
        return out

    def __getattr__(self, name: str):
        return getattr(self.control, name)


class Fleet:
    """A Control and the daemons it hears from, played by the test."""

    def __init__(self, n: int = 0, **timings) -> None:
        self.ctl = Placing(Control(MemoryJobStore(), Timings(**timings)))
        self.conns = {}
        for i in range(n):
            self.register(f"w{i}", i)

    def register(self, wid: str, index: int = 0) -> Out:
        out = self.ctl.handle(Register(wpb.Register(
            worker_id=wid, host="h1", address=f"10.0.0.{index + 1}", backend="gloo",
            device=pb.Device(type="cpu", index=index, name="cpu", memory_bytes=1 << 34))))
        self.conns[wid] = out.conn
        return out

    def submit(self, n: int = 2, sizes=(1024,), **spec) -> Out:
        placement = pb.Placement(worker_ids=spec.pop("worker_ids", ()))
        return self.ctl.handle(Submit(jobspec.normalize(pb.JobSpec(
            world_size=n, placement=placement, **spec,
            collective=pb.CollectiveSpec(op="all_reduce", sizes=list(sizes), iters=1)))))

    def msg(self, wid: str, **msg) -> Out:
        return self.ctl.handle(WorkerMsg(self.conns[wid], wpb.WorkerMessage(**msg)))

    def done(self, wid: str, job_id: str, rank: int, ok: bool = True, **kw) -> Out:
        return self.msg(wid, done=wpb.JobDone(job_id=job_id, rank=rank, ok=ok, **kw))

    def beat(self, wid: str, job_id: str, op_seq: int = 0, health: int = pb.EXECUTOR_OK, detail: str = "") -> Out:
        return self.msg(wid, heartbeat=wpb.Heartbeat(job_id=job_id, op_seq=op_seq, executor=health,
                                                     executor_detail=detail))

    def job(self, job_id: str) -> pb.Job:
        return self.ctl.get(job_id)

    def state(self, wid: str) -> int:
        return self.conns[wid].state


def row(size: int, busbw: float = 1.0) -> pb.SizeResult:
    return pb.SizeResult(op="all_reduce", dtype="float32", reduce_op="sum", size_bytes=size, world_size=2,
                         busbw_gbps=busbw)


def started(f: Fleet, n: int = 2, **spec) -> str:
    """A job placed on w0..w(n-1), its store ready and every rank assigned."""
    job_id = f.submit(n, **spec).job.id
    out = f.msg("w0", store_ready=wpb.StoreReady(job_id=job_id, store_port=4242))
    assert sends(out) == [(f"w{r}", "assignment") for r in range(1, n)]
    return job_id


def test_a_submit_waits_and_the_registration_that_completes_the_gang_places_it():
    f = Fleet()
    out = f.submit(2)
    assert sends(out) == [] and out.job.state == pb.QUEUED
    assert [e.state.state for e, _ in out.events] == [pb.QUEUED]
    assert sends(f.register("w0", 0)) == [("w0", "registered")]
    out = f.register("w1", 1)
    # Rank 0 alone is told first: it binds the store before the others learn the port.
    assert sends(out) == [("w1", "registered"), ("w0", "assignment")]
    assert out.sends[1][1].assignment.store_port == 0
    assert [e.state.state for e, _ in out.events] == [pb.RUNNING]
    assert (f.state("w0"), f.state("w1")) == (pb.BUSY, pb.BUSY)


def test_the_assignments_after_store_ready_carry_rank_0s_address_and_port():
    f = Fleet(3)
    job_id = f.submit(3).job.id
    out = f.msg("w0", store_ready=wpb.StoreReady(job_id=job_id, store_port=4242))
    assert sends(out) == [("w1", "assignment"), ("w2", "assignment")]
    got = [(m.assignment.rank, m.assignment.store_host, m.assignment.store_port) for _, m in out.sends]
    assert got == [(1, "10.0.0.1", 4242), (2, "10.0.0.1", 4242)]


def test_a_rank_that_finishes_frees_its_worker_for_the_next_job_in_the_same_input():
    f = Fleet(2)
    first = started(f)
    second = f.submit(2).job.id
    assert f.job(second).state == pb.QUEUED
    f.done("w0", first, 0)
    out = f.done("w1", first, 1)
    assert f.job(first).state == pb.SUCCEEDED and f.job(second).state == pb.RUNNING
    assert sends(out) == [("w0", "assignment")]


def test_cancel_of_a_queued_job_lets_the_job_behind_it_start():
    f = Fleet(1)
    blocker = f.submit(2).job.id  # can never start on one worker... until one more connects
    small = f.submit(1).job.id
    assert f.job(small).state == pb.RUNNING  # the blocker reserves nothing: the fleet cannot run it
    f.ctl.handle(Cancel(blocker, "by test"))
    assert f.job(blocker).state == pb.CANCELLED


def test_streamed_rows_are_stored_once_and_jobdone_only_fills_in_what_never_arrived():
    f = Fleet(2)
    job_id = started(f, sizes=(1024, 2048))
    out = f.msg("w0", result=wpb.ResultReport(job_id=job_id, result=row(1024, busbw=5.0)))
    assert [e.result.size_bytes for e, _ in out.events] == [1024]
    f.msg("w0", result=wpb.ResultReport(job_id=job_id, result=row(1024, busbw=7.0)))  # a repeat: dropped
    f.done("w1", job_id, 1)
    out = f.done("w0", job_id, 0, results=[row(1024, busbw=9.0), row(2048, busbw=3.0)])
    assert [e.result.size_bytes for e, _ in out.events if e.WhichOneof("event") == "result"] == [2048]
    got = f.job(job_id)
    assert got.state == pb.SUCCEEDED
    assert [(r.size_bytes, r.busbw_gbps) for r in got.results] == [(1024, 5.0), (2048, 3.0)]


def test_a_final_set_with_a_foreign_row_fails_the_job_naming_the_rank():
    f = Fleet(2)
    job_id = started(f)
    f.done("w0", job_id, 0, results=[row(999)])
    got = f.job(job_id)
    assert got.state == pb.FAILED
    assert got.reason.startswith("rank 0 (worker w0) reported a result that is not this job's: size 999")
    assert f.ctl.protocol.rejected["done"] == 1


def test_a_member_that_reports_as_another_rank_is_not_freed_and_its_job_fails_naming_it():
    f = Fleet(2)
    job_id = started(f)
    out = f.done("w1", job_id, 0)  # rank 1 claims to be rank 0
    got = f.job(job_id)
    assert got.state == pb.FAILED and got.reason == "rank 1 (worker w1) sent a report as rank 0"
    assert sorted(sends(out)) == [("w0", "abort"), ("w1", "abort")]
    assert f.state("w1") == pb.BUSY and f.ctl.protocol.rejected["done"] == 1
    f.done("w1", job_id, 1, failure=wpb.ABORTED, error="aborted")  # its honest report frees it
    assert f.state("w1") == pb.IDLE


def test_a_jobdone_from_a_worker_outside_the_job_is_counted_and_frees_nobody():
    f = Fleet(3)
    job_id = f.submit(2, worker_ids=["w0", "w1"]).job.id
    assert sends(f.done("w2", job_id, 0)) == []
    assert f.ctl.protocol.rejected["done"] == 1
    assert (f.job(job_id).state, f.state("w0"), f.state("w2")) == (pb.RUNNING, pb.BUSY, pb.IDLE)


@pytest.mark.parametrize("health, detail", [(pb.EXECUTOR_STOPPED, "process stopped"),
                                            (pb.EXECUTOR_UNRESPONSIVE, "no sign of life for 3.1 s")])
def test_a_rank_reported_unwell_for_unwell_s_fails_its_job_whatever_the_op_deadline(health, detail):
    f = Fleet(2)
    job_id = started(f)
    f.beat("w0", job_id, 5)
    f.beat("w1", job_id, 5, health, detail)
    t0 = time.monotonic()
    f.ctl.handle(Tick(t0 + 3.5))
    assert f.job(job_id).state == pb.RUNNING  # under unwell_s (4 s)
    out = f.ctl.handle(Tick(t0 + 4.5))
    got = f.job(job_id)
    assert got.state == pb.FAILED
    assert got.reason.startswith(f"rank 1 (worker w1) is not responding ({detail}) for "), got.reason
    assert sorted(sends(out)) == [("w0", "abort"), ("w1", "abort")]


def test_an_executor_well_again_is_not_blamed():
    f = Fleet(2)
    job_id = started(f)
    f.beat("w1", job_id, 5, pb.EXECUTOR_STOPPED, "process stopped")
    f.beat("w1", job_id, 6)
    f.ctl.handle(Tick(time.monotonic() + 4.5))
    assert f.job(job_id).state == pb.RUNNING


def test_a_rank_stopped_while_its_group_forms_is_named():
    f = Fleet(2)
    job_id = f.submit(2).job.id  # rank 0 assigned, no store yet
    f.beat("w0", job_id, 0, pb.EXECUTOR_STOPPED, "process stopped")
    f.ctl.handle(Tick(time.monotonic() + 4.5))
    assert f.job(job_id).reason.startswith("rank 0 (worker w0) is not responding (process stopped)")


def test_a_group_that_does_not_form_within_rendezvous_timeout_names_the_ranks_not_joined():
    f = Fleet(3, heartbeat_timeout_s=100)
    job_id = started(f, n=3, rendezvous_timeout_s=5)
    t0 = time.monotonic()
    f.ctl.handle(Tick(t0 + 4))
    assert f.job(job_id).state == pb.RUNNING
    f.ctl.handle(Tick(t0 + 5.5))
    got = f.job(job_id)
    assert got.state == pb.FAILED
    assert got.reason == ("the process group did not form within 5 s (rendezvous_timeout_s): "
                          "rank 1 (worker w1), rank 2 (worker w2) have not joined"), got.reason


def test_a_group_of_one_that_does_not_form_names_its_rank_never_an_empty_list():
    f = Fleet(1, heartbeat_timeout_s=100)
    job_id = started(f, n=1, rendezvous_timeout_s=5)
    f.ctl.handle(Tick(time.monotonic() + 5.5))
    got = f.job(job_id)
    assert got.state == pb.FAILED
    assert got.reason.endswith("rank 0 (worker w0) opened the group's store but did not get past its init"), got.reason


def test_rendezvous_defaults_to_30_s_and_rank_0_without_a_store_is_named():
    f = Fleet(2, heartbeat_timeout_s=100)  # the daemons stay heard from
    job_id = f.submit(2).job.id
    t0 = time.monotonic()
    f.ctl.handle(Tick(t0 + 29))
    assert f.job(job_id).state == pb.RUNNING
    f.ctl.handle(Tick(t0 + 31))
    assert f.job(job_id).reason.endswith("rank 0 (worker w0) did not open the group's store")


def test_an_op_past_the_counter_seen_at_start_means_the_group_formed():
    f = Fleet(2, heartbeat_timeout_s=100)
    for w in ("w0", "w1"):
        f.beat(w, "", op_seq=40)  # an executor that ran ops before (counters are per executor)
    job_id = started(f)
    f.beat("w1", job_id, op_seq=40)
    t0 = time.monotonic()
    f.beat("w0", job_id, op_seq=41)  # past init on one rank: init ends on every rank together
    f.ctl.handle(Tick(t0 + 31))
    assert f.job(job_id).state == pb.RUNNING  # no rendezvous verdict; the op deadline is 120 s


def test_a_silent_worker_is_lost_its_stream_closed_and_its_job_failed():
    f = Fleet(2)
    job_id = started(f)
    f.conns["w1"].last_heartbeat -= 6
    out = f.ctl.handle(Tick(time.monotonic()))
    assert ("w1", "close") in sends(out) and ("w0", "abort") in sends(out)
    assert f.job(job_id).reason.startswith("rank 1 (worker w1) lost: no heartbeat for")
    assert f.state("w1") == pb.DISCONNECTED


def test_a_quarantined_worker_gets_only_jobs_that_name_it():
    f = Fleet(3)
    f.ctl.handle(Cordon("w1", True))
    assert f.state("w1") == pb.IDLE and f.ctl.health.quarantined("w1")  # one fact: the health record
    free = f.submit(2).job.id
    assert [w.worker_id for w in f.job(free).workers] == ["w0", "w2"]
    waiting = f.submit(1).job.id
    assert f.job(waiting).state == pb.QUEUED  # w1 is the only one not busy
    named = f.submit(1, worker_ids=["w1"]).job.id
    assert [w.worker_id for w in f.job(named).workers] == ["w1"] and f.state("w1") == pb.BUSY
    f.msg("w1", store_ready=wpb.StoreReady(job_id=named, store_port=1))
    f.done("w1", named, 0)
    assert f.state("w1") == pb.IDLE and f.job(waiting).state == pb.QUEUED  # not back to the pool
    f.ctl.handle(Cordon("w1", False))
    assert f.job(waiting).workers[0].worker_id == "w1" and f.state("w1") == pb.BUSY


def test_quarantine_holds_for_the_worker_id_across_reconnects_and_before_it_registers():
    f = Fleet(1)
    f.ctl.health.cordon("w1", True)  # known to the health book (as after a restart), not registered yet
    f.register("w1", 1)
    assert f.ctl.health.quarantined("w1")
    job_id = f.submit(2).job.id
    assert f.job(job_id).reason == "needs 2 workers: 2 connected, 1 idle, 0 busy, 1 cordoned"  # counted apart
    f.ctl.handle(Disconnect(f.conns["w1"], "test"))
    f.register("w1", 1)
    assert f.ctl.health.quarantined("w1") and f.job(job_id).state == pb.QUEUED
    f.ctl.handle(Cordon("w1", False))
    assert f.job(job_id).state == pb.RUNNING


def test_re_entering_handle_raises_and_changes_nothing():
    f = Fleet(2)
    f.ctl._guard.applying = "Tick"  # as while another input is being applied
    with pytest.raises(ReentryError, match="Submit.*while applying Tick"):
        f.submit(2)
    f.ctl._guard.applying = None
    assert len(f.ctl.book.queued) == 0 and f.state("w0") == pb.IDLE
    job_id = f.submit(2).job.id  # the guard is released after each input, also one that raised
    assert f.job(job_id).state == pb.RUNNING


def test_a_cordon_of_an_unknown_worker_is_refused_naming_it():
    f = Fleet(1)
    with pytest.raises(NotFound, match="worker nobody not found"):
        f.ctl.handle(Cordon("nobody", True))
    with pytest.raises(Exception, match="worker_id"):
        f.ctl.handle(Cordon("x" * 5000, True))
    f.ctl.handle(Tick(time.monotonic()))  # a refused input leaves the reactor usable

def test_liveness_only_returns_verdicts_and_changes_nothing():
    f = Fleet(2)
    job_id = started(f)
    f.conns["w1"].last_heartbeat -= 6
    f.beat("w0", job_id, 3, pb.EXECUTOR_STOPPED, "process stopped")
    now = time.monotonic() + 4.5
    got = liveness.verdicts(now, f.ctl.book.running.values(), f.ctl.workers, f.ctl.timings)
    assert [type(v).__name__ for v in got] == ["Lost", "Fail"]
    assert got[0].conn is f.conns["w1"] and got[1].job_id == job_id
    assert got[1].reason.startswith("rank 0 (worker w0) is not responding (process stopped) for ")
    assert (f.state("w1"), f.job(job_id).state) == (pb.BUSY, pb.RUNNING)  # nothing applied


def test_what_waits_in_the_inbox_is_not_silence():
    """A tick counts a worker's silence, and a report of an unwell executor, up to when the oldest
    worker message still waiting to be applied arrived (Tick.heard), not up to now: a core
    behind on its inbox must not declare live workers lost."""
    f = Fleet(2)
    job_id = started(f)
    f.conns["w1"].last_heartbeat -= 6
    f.beat("w0", job_id, 3, pb.EXECUTOR_STOPPED, "process stopped")
    now = time.monotonic() + 4.5
    waiting = liveness.verdicts(now, f.ctl.book.running.values(), f.ctl.workers, f.ctl.timings, heard=now - 6)
    assert waiting == []  # as heard, w1 has been silent 4.5 s and w0 not yet reported unwell
    out = f.ctl.handle(Tick(now, heard=now - 6))
    assert (f.state("w1"), f.job(job_id).state) == (pb.BUSY, pb.RUNNING) and not out.sends
    f.ctl.handle(Tick(now + 0.5))  # nothing waits: now is what was heard
    assert (f.state("w1"), f.job(job_id).state) == (pb.DISCONNECTED, pb.FAILED)


def test_a_job_whose_workers_miss_the_restart_grace_is_requeued_then_placed_again():
    store = MemoryJobStore()
    first = Placing(Control(store))
    first.handle(Register(wpb.Register(worker_id="w0", host="h1", address="10.0.0.1", backend="gloo",
                                       device=pb.Device(type="cpu", name="cpu"))))
    job_id = first.handle(Submit(jobspec.normalize(pb.JobSpec(
        world_size=1, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))))).job.id
    f = Fleet()  # a new coordinator over the same store
    f.ctl = Placing(Control(store, Timings(heartbeat_timeout_s=100)))
    t0 = time.monotonic()
    f.ctl.handle(Reload(reattach_deadline=t0 + 15))
    assert f.job(job_id).state == pb.RUNNING  # waiting for its worker
    out = f.ctl.handle(Tick(t0 + 16))
    assert f.job(job_id).state == pb.QUEUED and sends(out) == []
    out = f.register("w0")
    assert sends(out) == [("w0", "registered"), ("w0", "assignment")]
    assert f.job(job_id).state == pb.RUNNING


def test_a_job_still_queued_at_its_queue_timeout_is_cancelled_saying_what_it_waited_for():
    f = Fleet(1)
    waits = f.submit(2, queue_timeout_s=5).job
    runs = f.submit(1, queue_timeout_s=5).job
    f.ctl.handle(Tick(time.monotonic(), wall=waits.created_at + 4.9))
    assert f.job(waits.id).state == pb.QUEUED
    out = f.ctl.handle(Tick(time.monotonic(), wall=runs.created_at + 5))
    got = f.job(waits.id)
    assert got.state == pb.CANCELLED and sends(out) == []
    assert got.reason == "still queued after its queue timeout of 5 s: needs 2 workers, 1 connected"
    assert f.job(runs.id).state == pb.RUNNING  # placed in time: its deadline no longer applies


def test_a_waiting_reason_counts_the_quarantined_and_the_cordoned_apart():
    f = Fleet(1)
    f.ctl.health.cordon("w1", True)  # an operator's cordon
    f.ctl.health.record({"w2": pb.WorkerHealth(verdict=pb.UNHEALTHY, check="gpu_check")})  # a failed check
    f.register("w1", 1)
    f.register("w2", 2)
    job_id = f.submit(3).job.id
    assert f.job(job_id).reason == "needs 3 workers: 3 connected, 1 idle, 0 busy, 1 quarantined, 1 cordoned"


def _restarted_over_a_forming_job() -> tuple[Fleet, str, list[str]]:
    """A job placed on a new group, and the coordinator that placed it gone before rank 0 reported
    its store (so it sent rank 0 its assignment only). A new coordinator over the same store."""
    store = MemoryJobStore()
    first = Placing(Control(store))
    for i in range(2):
        first.handle(Register(wpb.Register(worker_id=f"w{i}", host="h1", address=f"10.0.0.{i + 1}", backend="gloo",
                                           device=pb.Device(type="cpu", index=i, name="cpu"))))
    job_id = first.handle(Submit(jobspec.normalize(pb.JobSpec(
        world_size=2, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))))).job.id
    assert first.book.running[job_id].assigned == {0}
    members = [w.worker_id for w in first.book.running[job_id].job.workers]
    f = Fleet()
    f.ctl = Placing(Control(store, Timings(heartbeat_timeout_s=100)))
    f.ctl.handle(Reload(reattach_deadline=time.monotonic() + 15))
    return f, job_id, members


def _rank0_back(f: Fleet, job_id: str, worker: str, forming: bool, port: int = 0) -> Out:
    out = f.ctl.handle(Register(wpb.Register(worker_id=worker, host="h1", address="10.0.0.1", backend="gloo",
                                             device=pb.Device(type="cpu", index=0, name="cpu"), running_job_id=job_id,
                                             running_rank=0, forming=forming, forming_store_port=port)))
    f.conns[worker] = out.conn
    return out


def _assignment(out: Out, worker: str) -> wpb.Assignment | None:
    return next((m.assignment for c, m in out.sends if c.worker_id == worker and m is not CLOSE
                 and m.WhichOneof("msg") == "assignment"), None)


def test_a_member_that_comes_back_without_its_job_after_a_restart_requeues_it_at_once():
    """Its daemon restarted while the coordinator was down: that rank's run is gone (rank 0's group
    formed). The job is requeued as the member registers, not after the grace, and the member that
    re-attached is told to stop."""
    f, job_id, members = _restarted_over_a_forming_job()
    back = _rank0_back(f, job_id, members[0], forming=False)
    assert f.job(job_id).state == pb.RUNNING and sends(back) == [(members[0], "registered")]  # re-attached
    out = f.register(members[1], 1)  # no job named: its daemon restarted
    assert f.job(job_id).state == pb.QUEUED
    assert f.ctl.store.events(job_id)[-1].state.reason == ("requeued: interrupted by a coordinator restart; rank 1 "
                                                      f"(worker {members[1]}) came back without it")
    assert (members[0], "abort") in sends(out)
    assert f.ctl.reattach.awaiting == {}


def test_a_member_back_without_a_job_whose_group_was_still_forming_is_assigned_to_its_store():
    """Killed between placing a job on a new group and hearing rank 0's store: the other ranks
    were never sent their assignment. Rank 0 says its group is still forming (the store's port):
    the member that comes back without the job is assigned to that store, and the job runs on as
    placed (never requeued), whichever of them registers first, and whether rank 0 has bound its
    store yet (then its StoreReady follows its registration)."""
    for order in ("rank 0 first", "rank 1 first", "rank 0 still binding"):
        f, job_id, members = _restarted_over_a_forming_job()
        if order == "rank 0 first":
            _rank0_back(f, job_id, members[0], forming=True, port=29555)
            out = f.register(members[1], 1)
        elif order == "rank 1 first":
            out = f.register(members[1], 1)
            assert _assignment(out, members[1]) is None and f.state(members[1]) == pb.BUSY  # kept for the job
            out = _rank0_back(f, job_id, members[0], forming=True, port=29555)
        else:
            _rank0_back(f, job_id, members[0], forming=True)
            out = f.register(members[1], 1)
            assert _assignment(out, members[1]) is None and f.state(members[1]) == pb.BUSY
            out = f.msg(members[0], store_ready=wpb.StoreReady(job_id=job_id, store_port=29555))
        a = _assignment(out, members[1])
        assert a is not None and (a.job_id, a.rank, a.store_port, a.store_host) == (job_id, 1, 29555, "10.0.0.1")
        rj = f.ctl.book.running[job_id]
        assert f.job(job_id).state == pb.RUNNING and rj.reattach_deadline == 0 and rj.attached == {0, 1}
        assert [e.state.state for e in f.ctl.store.events(job_id) if e.HasField("state")] == [pb.QUEUED, pb.RUNNING]
        f.done(members[0], job_id, 0)
        f.done(members[1], job_id, 1)
        assert f.job(job_id).state == pb.SUCCEEDED


def test_a_member_back_before_a_formed_rank_0_requeues_the_job_then_and_is_freed():
    """Rank 0 comes back from a group that formed (no forming store): the member that came back
    without the job lost its run; the job is requeued as rank 0 registers, and the member kept
    for it meanwhile is free again."""
    f, job_id, members = _restarted_over_a_forming_job()
    f.register(members[1], 1)
    out = _rank0_back(f, job_id, members[0], forming=False)
    assert f.job(job_id).state in (pb.QUEUED, pb.RUNNING)
    assert [e.state.state for e in f.ctl.store.events(job_id) if e.HasField("state")][:3] == [pb.QUEUED, pb.RUNNING, pb.QUEUED]
    assert (members[0], "abort") in sends(out)


def test_a_check_that_waits_too_long_holds_its_workers_until_it_starts():
    """Under steady user traffic each worker that frees up is taken by the next user job, so a
    check naming two never finds both idle; after check_hold_after_s its workers take no new user
    job, and it starts when the last one's job ends (coordinator/core/check_hold.py)."""
    f = Fleet(3, check_hold_after_s=60, check_hold_share=1.0)
    u1 = f.submit(1, worker_ids=["w0"]).job.id
    check = f.ctl.handle(Submit(jobspec.normalize(pb.JobSpec(
        world_size=2, priority=checks.CHECK_PRIORITY, placement=pb.Placement(worker_ids=["w0", "w1"]),
        gpu_check=pb.GpuCheckSpec())))).job
    u2 = f.submit(1, worker_ids=["w1"]).job.id  # a user job is ahead of the check: it takes w1
    f.done("w0", u1, 0)
    u3 = f.submit(1, worker_ids=["w0"]).job.id  # ... and w0, as it frees up
    assert f.job(check.id).state == pb.QUEUED and f.job(u3).state == pb.RUNNING
    f.ctl.handle(Tick(time.monotonic(), wall=check.created_at + 59))
    f.done("w1", u2, 0)
    u4 = f.submit(1, worker_ids=["w1"]).job.id  # not held yet: taken again
    assert f.job(u4).state == pb.RUNNING and f.job(check.id).state == pb.QUEUED
    f.ctl.handle(Tick(time.monotonic(), wall=check.created_at + 61))  # held from now on
    f.done("w0", u3, 0)
    u5 = f.submit(1, worker_ids=["w0"]).job.id
    assert f.job(u5).state == pb.QUEUED and f.state("w0") == pb.IDLE  # w0 waits for the check
    assert f.job(f.submit(1, worker_ids=["w2"]).job.id).state == pb.RUNNING  # others run as before
    out = f.done("w1", u4, 0)
    assert f.job(check.id).state == pb.RUNNING and ("w0", "assignment") in sends(out)
    assert f.job(u5).state == pb.QUEUED  # after the check
    assert check.spec.priority == checks.CHECK_PRIORITY and f.job(check.id).spec.priority == checks.CHECK_PRIORITY


def test_checks_hold_at_most_their_share_of_the_fleet_oldest_first():
    f = Fleet(8, check_hold_after_s=60, check_hold_share=0.25)  # 2 of 8 workers
    busy = [f.submit(1, worker_ids=[f"w{i}"]).job.id for i in range(8)]
    gangs = [f.ctl.handle(Submit(jobspec.normalize(pb.JobSpec(
        world_size=2, priority=checks.CHECK_PRIORITY, placement=pb.Placement(worker_ids=[f"w{2 * k}", f"w{2 * k + 1}"]),
        gpu_check=pb.GpuCheckSpec())))).job for k in range(3)]
    f.ctl.handle(Tick(time.monotonic(), wall=max(g.created_at for g in gangs) + 61))
    assert f.ctl.check_hold.held == {gangs[0].id}
    for i in range(8):
        f.done(f"w{i}", busy[i], 0)  # every worker frees up; the held gang starts, and the others as before
    assert [f.job(g.id).state for g in gangs] == [pb.RUNNING] * 3
    f.ctl.handle(Tick(time.monotonic(), wall=max(g.created_at for g in gangs) + 62))
    assert f.ctl.check_hold.held == set() and f.ctl.check_hold.waiting == {}


def test_a_check_naming_a_gone_worker_is_not_held_and_takes_no_share():
    f = Fleet(5, check_hold_after_s=60, check_hold_share=0.4)  # 2 of 5 workers
    busy = [f.submit(1, worker_ids=[f"w{i}"]).job.id for i in range(4)]
    gone = f.ctl.handle(Submit(jobspec.normalize(pb.JobSpec(
        world_size=2, priority=checks.CHECK_PRIORITY, placement=pb.Placement(worker_ids=["w4", "w0"]),
        gpu_check=pb.GpuCheckSpec())))).job
    f.ctl.handle(Disconnect(f.conns["w4"], "stream ended"))
    later = f.ctl.handle(Submit(jobspec.normalize(pb.JobSpec(
        world_size=2, priority=checks.CHECK_PRIORITY, placement=pb.Placement(worker_ids=["w1", "w2"]),
        gpu_check=pb.GpuCheckSpec())))).job
    f.ctl.handle(Tick(time.monotonic(), wall=later.created_at + 61))
    assert f.ctl.check_hold.held == {later.id}  # the older check cannot run: the next one's turn
    f.done("w1", busy[1], 0)
    f.done("w2", busy[2], 0)
    assert f.job(later.id).state == pb.RUNNING and f.job(gone.id).state == pb.QUEUED
