"""The three state machines, exhaustively: every (from, to) pair is allowed exactly when its
table lists it, and the coordinator's objects change state only through them."""

import itertools

import pytest

from coordinator.core.events import EventBus
from coordinator.core.groups import Groups
from coordinator.core.jobs import JobBook
from coordinator.core.registry import WorkerRegistry
from coordinator.store.memory import MemoryJobStore
from ringleader import jobspec, states
from ringleader.states import BROKEN, DESTROYED, FORMING, WARM, IllegalTransition
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

EXPECTED = {
    "job": {
        (pb.QUEUED, pb.RUNNING), (pb.QUEUED, pb.CANCELLED), (pb.QUEUED, pb.FAILED), (pb.RUNNING, pb.SUCCEEDED),
        (pb.RUNNING, pb.FAILED), (pb.RUNNING, pb.CANCELLED), (pb.RUNNING, pb.QUEUED),
    },
    "worker": {(pb.IDLE, pb.BUSY), (pb.BUSY, pb.IDLE), (pb.IDLE, pb.DISCONNECTED), (pb.BUSY, pb.DISCONNECTED)},
    "warm group": {(FORMING, WARM), (FORMING, BROKEN), (WARM, BROKEN), (BROKEN, DESTROYED)},
}
MACHINES = {m.name: m for m in (states.JOBS, states.WORKERS, states.GROUPS)}


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_every_pair_is_allowed_exactly_when_listed(name):
    machine = MACHINES[name]
    for frm, to in itertools.product(machine.table, repeat=2):
        listed = (frm, to) in EXPECTED[name]
        assert machine.allowed(frm, to) == listed, (name, frm, to)
        if listed:
            machine.check(frm, to)
        else:
            with pytest.raises(IllegalTransition):
                machine.check(frm, to)


@pytest.mark.parametrize("frm", [pb.IDLE, pb.BUSY, pb.QUARANTINED, pb.DISCONNECTED])
def test_a_connection_is_never_quarantined(frm):
    # Quarantine is a fact of the health record, shown in listings; a connection that claimed it
    # would be a second copy of that fact.
    with pytest.raises(IllegalTransition):
        states.WORKERS.check(frm, pb.QUARANTINED)
    if frm != pb.QUARANTINED:
        with pytest.raises(IllegalTransition):
            states.WORKERS.check(pb.QUARANTINED, frm)


def test_terminal_states():
    assert set(states.TERMINAL) == {pb.SUCCEEDED, pb.FAILED, pb.CANCELLED}
    assert states.WORKERS.terminal == {pb.DISCONNECTED}
    assert states.GROUPS.terminal == {DESTROYED}


def _book():
    store = MemoryJobStore()
    return JobBook(store, EventBus(store))


def test_a_job_changes_state_only_through_the_table():
    book = _book()
    job = book.submit(jobspec.normalize(pb.JobSpec(world_size=1, collective=pb.CollectiveSpec(op="barrier"))))
    with pytest.raises(IllegalTransition):
        book.transition(job, pb.SUCCEEDED, "skipping RUNNING")
    book.finish(job.id, pb.CANCELLED, "by test")
    with pytest.raises(IllegalTransition):
        book.transition(job, pb.RUNNING, "a cancelled job never runs")
    stored = book.store.get(job.id)
    assert stored.state == pb.CANCELLED and stored.finished_at > 0
    assert [e.state.state for e in book.store.events(job.id)] == [pb.QUEUED, pb.CANCELLED]


def test_a_worker_connection_changes_state_only_through_the_table():
    conn = WorkerRegistry().add(wpb.Register(worker_id="w0"))
    conn.transition(pb.BUSY, "j1", 0)
    assert (conn.state, conn.job_id) == (pb.BUSY, "j1")
    conn.transition(pb.DISCONNECTED)
    with pytest.raises(IllegalTransition):
        conn.transition(pb.IDLE)  # a connection that ended never comes back: the worker registers anew


def test_a_warm_group_changes_state_only_through_the_table():
    groups = Groups()
    g = groups.form("k/2", ("a", "b"))
    with pytest.raises(IllegalTransition):
        groups.transition(g, DESTROYED)  # only a broken group is destroyed
    groups.succeeded("k/2")
    assert g.state == WARM
    with pytest.raises(IllegalTransition):
        groups.transition(g, FORMING)
