"""The coordinator's facade in process, no servers: the test plays the worker daemons (it
registers them and sends their messages through the facade, and reads what the coordinator puts
on their streams) and drives failure detection with explicit clock ticks."""

from __future__ import annotations

import time

import pytest

from coordinator.core.inputs import Reload
from coordinator.shell.facade import Coordinator, Timings
from coordinator.store.memory import MemoryJobStore
from ringleader.defaults import PAGE_MAX
from ringleader.states import BROKEN, WARM
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb


class Worker:
    """A worker daemon played by the test."""

    def __init__(self, core: Coordinator, worker_id: str, index: int = 0, **register) -> None:
        self.core = core
        self.id = worker_id
        self.conn = core.register(wpb.Register(
            worker_id=worker_id, host="h1", address=f"10.0.0.{index + 1}", backend="gloo", version="test",
            device=pb.Device(type="cpu", index=index, name="cpu", memory_bytes=1 << 34), **register))
        first = self.conn.outbox.get_nowait()
        assert first.WhichOneof("msg") == "registered"

    def inbox(self) -> list[tuple[str, object]]:
        """What the coordinator sent down this worker's stream since the last look."""
        out = []
        while not self.conn.outbox.empty():
            msg = self.conn.outbox.get_nowait()
            if msg is not None:
                kind = msg.WhichOneof("msg")
                out.append((kind, getattr(msg, kind)))
        return out

    def kinds(self) -> list[str]:
        return [k for k, _ in self.inbox()]

    def send(self, **msg) -> None:
        self.core.on_message(self.conn, wpb.WorkerMessage(**msg))

    def done(self, job_id: str, rank: int, ok: bool = True, holds: str = "", **kw) -> None:
        self.send(done=wpb.JobDone(job_id=job_id, rank=rank, ok=ok, warm_group=holds, **kw))

    @property
    def state(self) -> int:
        return self.conn.state


def spec(n: int = 2, **placement) -> pb.JobSpec:
    return pb.JobSpec(world_size=n, placement=pb.Placement(**placement),
                      collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))


@pytest.fixture
def core():
    return Coordinator(MemoryJobStore(), Timings(heartbeat_timeout_s=5, blame_grace_s=3))


def workers(core, n: int) -> list[Worker]:
    return [Worker(core, f"w{i}", i) for i in range(n)]


def run_new_group(core, ws, job_id) -> str:
    """Answer a new group's rendezvous and finish the job on every rank; returns the group key."""
    (kind, a0), = ws[0].inbox()
    assert kind == "assignment" and a0.rank == 0 and a0.store_port == 0
    ws[0].send(store_ready=wpb.StoreReady(job_id=job_id, group_key=a0.group_key, store_port=4242))
    for rank, w in enumerate(ws[1:], 1):
        (kind, a), = w.inbox()
        assert (kind, a.rank, a.store_port, a.store_host) == ("assignment", rank, 4242, "10.0.0.1")
    for rank, w in enumerate(ws):
        w.done(job_id, rank, holds=a0.group_key)
    return a0.group_key


def test_a_job_waits_for_workers_then_rank_0_binds_the_store_before_the_others_are_told(core):
    job = core.submit(spec())
    assert (job.state, job.reason) == (pb.QUEUED, "needs 2 workers, 0 connected")
    ws = workers(core, 2)
    assert core.get(job.id).state == pb.RUNNING
    assert all(w.state == pb.BUSY for w in ws)
    key = run_new_group(core, ws, job.id)
    done = core.get(job.id)
    assert (done.state, done.reason) == (pb.SUCCEEDED, "all ranks finished")
    assert all(w.state == pb.IDLE for w in ws)
    assert core.groups.warm() == {2: {key: ("w0", "w1")}}  # ready groups by size


def test_the_same_gang_reuses_its_warm_group_and_every_rank_is_assigned_at_once(core):
    ws = workers(core, 2)
    key = run_new_group(core, ws, core.submit(spec()).id)
    job = core.submit(spec())
    assert core.get(job.id).warm_start
    for rank, w in enumerate(ws):
        (kind, a), = w.inbox()
        assert (kind, a.rank, a.group_key) == ("assignment", rank, key)
        w.done(job.id, rank, holds=key)
    assert core.get(job.id).state == pb.SUCCEEDED


def test_a_gang_that_takes_part_of_a_warm_group_makes_every_member_drop_it_first(core):
    ws = workers(core, 4)
    key = run_new_group(core, ws, core.submit(spec(4)).id)
    job = core.submit(spec(2))
    assert not core.get(job.id).warm_start
    seen = {w.id: w.inbox() for w in ws}
    taken = [w.worker_id for w in core.get(job.id).workers]
    for w in ws:
        kinds = [k for k, _ in seen[w.id]]
        assert kinds[0] == "drop_group" and seen[w.id][0][1].group_key == key, (w.id, kinds)
        if w.id == taken[0]:
            assert kinds == ["drop_group", "assignment"]  # on the same ordered stream: drop, then run
    assert core.groups.get(key).state == BROKEN
    for w in ws:
        w.send(group_dropped=wpb.GroupDropped(group_key=key))
    assert core.groups.get(key) is None  # destroyed: no member holds it


def test_a_worker_holding_a_group_this_coordinator_does_not_know_is_told_to_drop_it(core):
    w = Worker(core, "w9", warm_group="ffff/2")
    assert w.kinds() == ["drop_group"]


def test_cancel_aborts_assigned_ranks_and_frees_ranks_never_told(core):
    ws = workers(core, 2)
    job = core.submit(spec())
    assert ws[0].kinds() == ["assignment"] and ws[1].kinds() == []  # rank 1 waits for the store
    assert core.cancel(job.id).state == pb.CANCELLED
    assert ws[0].kinds() == ["abort"] and ws[0].state == pb.BUSY  # idle once its executor is replaced
    assert ws[1].state == pb.IDLE
    ws[0].done(job.id, 0, ok=False, failure=wpb.ABORTED, error="aborted")
    assert ws[0].state == pb.IDLE


def test_ranks_that_finish_with_nothing_to_say_store_no_log_row_unless_the_job_fails(core):
    """Every rank of a SUCCEEDED job reported: the quiet ones need no row. In a job that fails,
    they are stored empty, so `logs` tells them from ranks that never reported."""
    ws = workers(core, 3)
    ok = core.submit(spec(3))
    run_new_group(core, ws, ok.id)
    assert core.get(ok.id).state == pb.SUCCEEDED
    assert core.store.rank_logs(ok.id) == {}
    assert [(r.received, r.text) for r in core.job_logs(ok.id).ranks] == [(True, "")] * 3

    bad = core.submit(spec(3))
    for w in ws:
        w.inbox()
    ws[0].done(bad.id, 0)  # quiet
    ws[1].done(bad.id, 1, ok=False, failure=wpb.RANK_ERROR, error="boom", log="Traceback: boom")
    assert core.get(bad.id).state == pb.FAILED  # rank 2, aborted, has not reported yet
    assert core.store.rank_logs(bad.id) == {0: "", 1: "Traceback: boom"}
    assert [(r.received, r.text) for r in core.job_logs(bad.id).ranks] == \
        [(True, ""), (True, "Traceback: boom"), (False, "")]


def test_reports_from_workers_outside_the_job_are_dropped_and_counted(core):
    ws = workers(core, 3)
    job = core.submit(spec(2, worker_ids=["w0", "w1"]))
    intruder = ws[2]
    intruder.send(progress=wpb.ProgressReport(job_id=job.id, rank=0, progress=pb.Progress(done=1, total=1)))
    intruder.send(result=wpb.ResultReport(job_id=job.id, result=pb.SizeResult(op="<script>", busbw_gbps=9999)))
    intruder.send(store_ready=wpb.StoreReady(job_id=job.id, store_port=1))
    intruder.done(job.id, 0)
    got = core.get(job.id)
    assert (got.state, got.progress.done, list(got.results)) == (pb.RUNNING, 0, [])
    assert dict(core.dispatch.rejected) == {"progress": 1, "result": 1, "store_ready": 1, "done": 1}
    assert ws[1].kinds() == []  # the forged StoreReady told nobody where to connect


def _running(core, **w1_heartbeat):
    """A 2-rank job under way, both ranks at op 7; w1's last heartbeat says `w1_heartbeat`."""
    ws = workers(core, 2)
    job = core.submit(spec(2))
    for w in ws:
        w.send(heartbeat=wpb.Heartbeat(job_id=job.id, op_seq=7, executor=pb.EXECUTOR_OK))
    if w1_heartbeat:
        ws[1].send(heartbeat=wpb.Heartbeat(job_id=job.id, op_seq=7, **w1_heartbeat))
    return ws, job


def test_a_stall_names_the_rank_whose_executor_is_stopped_even_when_op_counters_are_equal(core):
    ws, job = _running(core, executor=pb.EXECUTOR_STOPPED, executor_detail="process stopped")
    core.tick()
    assert core.get(job.id).state == pb.RUNNING  # still within op_timeout_s
    core.book.running[job.id].last_progress -= 200  # longer than op_timeout_s (120 s)
    core.tick()
    reason = core.get(job.id).reason
    assert "rank 1 (worker w1) is not responding (process stopped)" in reason, reason


def test_equal_op_counters_and_no_unwell_executor_say_so_rather_than_blame_rank_0(core):
    ws, job = _running(core)
    core.book.running[job.id].last_progress -= 200
    core.tick()
    reason = core.get(job.id).reason
    assert "every rank is at op 7 and no executor is reported unwell" in reason, reason


def test_a_peer_error_blames_an_unwell_rank_at_once(core):
    ws, job = _running(core, executor=pb.EXECUTOR_UNRESPONSIVE, executor_detail="no sign of life for 4.0 s")
    ws[0].done(job.id, 0, ok=False, failure=wpb.PEER_ERROR, error="Timed out waiting 60000ms")
    core.tick()
    got = core.get(job.id)
    assert got.state == pb.FAILED
    assert got.reason.startswith("rank 1 (worker w1) is not responding (no sign of life for 4.0 s); "
                                 "rank 0 (worker w0) failed: Timed out"), got.reason


def test_a_peer_error_without_a_cause_fails_after_the_grace(core):
    ws, job = _running(core)
    ws[0].done(job.id, 0, ok=False, failure=wpb.PEER_ERROR, error="Connection reset by peer")
    core.tick()
    assert core.get(job.id).state == pb.RUNNING  # waiting for the cause to report
    core.tick(time.monotonic() + 3.5)
    got = core.get(job.id)
    assert got.state == pb.FAILED and got.reason.endswith("(a communication error; no rank reported a cause)")


def test_a_silent_worker_is_lost_and_its_job_fails_naming_it(core):
    ws, job = _running(core)
    ws[1].conn.last_heartbeat -= 6
    core.tick()
    got = core.get(job.id)
    assert got.state == pb.FAILED and got.reason.startswith("rank 1 (worker w1) lost: no heartbeat for")
    assert ws[1].state == pb.DISCONNECTED and ws[0].kinds()[-1] == "abort"


def test_a_stalled_event_loop_is_not_blamed_on_the_workers(core):
    workers(core, 2)
    now = time.monotonic()
    core.tick(now)
    core.tick(now + 30)  # the loop itself was held up for 30 s: nobody could be heard
    assert all(w.state == pb.IDLE for w in core.workers.all())


def test_a_running_job_is_re_attached_after_a_restart_and_its_group_adopted():
    store = MemoryJobStore()
    first = Coordinator(store)
    ws = workers(first, 2)
    job = first.submit(spec())
    (_, a0), = ws[0].inbox()
    # The coordinator dies; a new one over the same store reloads the running job.
    second = Coordinator(store)
    second._do(Reload(reattach_deadline=time.monotonic() + 15))
    back = [Worker(second, f"w{i}", i, running_job_id=job.id, running_rank=i, warm_group=a0.group_key)
            for i in range(2)]
    assert all(w.kinds() == [] for w in back)  # nothing to drop: it is the job's group
    for rank, w in enumerate(back):
        w.done(job.id, rank, holds=a0.group_key)
    assert second.get(job.id).state == pb.SUCCEEDED
    assert second.groups.get(a0.group_key).state == WARM


def test_paging_reports_a_next_page_at_the_largest_page(core):
    for _ in range(PAGE_MAX + 2):
        core.submit(spec(3))
    first = core.list_jobs(limit=PAGE_MAX)
    assert len(first.jobs) == PAGE_MAX and first.next_before == first.jobs[-1].id
    rest = core.list_jobs(limit=PAGE_MAX, before_id=first.next_before)
    assert len(rest.jobs) == 2 and rest.next_before == ""


def test_a_quarantined_worker_is_listed_as_such_and_left_out_of_user_jobs(core):
    ws = workers(core, 3)
    core.cordon("w2", True)
    assert [w.worker_id for w in core.list_workers([pb.QUARANTINED]).workers] == ["w2"]
    job = core.submit(spec(2))
    assert [w.worker_id for w in core.get(job.id).workers] == ["w0", "w1"]
    core.cordon("w2", False)
    assert ws[2].state == pb.IDLE


def test_a_ticks_placement_pass_runs_in_a_later_turn_not_inside_the_tick():
    """A tick's verdicts and its placement pass held the loop together (60-90 ms in a drain): the
    tick now asks the pacer for its pass, which runs at the end of the turn, as other inputs' do."""
    import asyncio

    async def main() -> tuple[int, int]:
        core = Coordinator(MemoryJobStore(), Timings(heartbeat_timeout_s=5))
        workers(core, 2)
        await asyncio.sleep(0)
        core.submit(spec(3))  # waits for a third worker (reserving nothing): a queue to join
        job = core.submit(spec(1))  # behind a queue, its placement pass is due at the end of this turn
        core.tick()
        in_tick = core.get(job.id).state
        # A later turn: the next, unless the pacer spaces it after a slow last pass (a loaded machine).
        for _ in range(200):
            await asyncio.sleep(0.005)
            if core.get(job.id).state != pb.QUEUED:
                break
        return in_tick, core.get(job.id).state

    in_tick, after = asyncio.run(main())
    assert in_tick == pb.QUEUED and after == pb.RUNNING


def test_a_submit_is_placed_in_its_own_call_on_an_empty_queue_and_answered_queued_behind_one():
    """Nothing else queued: its pass can start only this job, so it runs in the call and the
    answer says RUNNING. Behind a queue, the call answers at once, QUEUED, and the job is placed at
    the end of the turn with the turn's other inputs (a pass per submit was a fifth of a drain's CPU)."""
    import asyncio

    async def main() -> None:
        core = Coordinator(MemoryJobStore(), Timings(heartbeat_timeout_s=5))
        workers(core, 3)
        assert core.submit(spec(1)).state == pb.RUNNING  # an empty queue: placed now
        core.submit(spec(4))  # waits for a fourth worker (reserving nothing): a queue
        behind = core.submit(spec(1))
        assert behind.state == pb.QUEUED and core.get(behind.id).state == pb.QUEUED  # a worker is idle
        for _ in range(200):  # its pass: at the end of this turn (or the pacer's, on a loaded machine)
            await asyncio.sleep(0.005)
            if core.get(behind.id).state != pb.QUEUED:
                break
        assert core.get(behind.id).state == pb.RUNNING

    asyncio.run(main())
