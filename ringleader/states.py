"""The three state machines of ringleader, written once: jobs, worker connections, warm groups.

Every state change in the coordinator goes through `Machine.check`; a change a table does not
list raises IllegalTransition (a bug, never a user error). README.md draws the same tables.

Jobs (JobState):
    QUEUED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED
    QUEUED -> CANCELLED
    QUEUED -> FAILED      only when its preflight failed a worker its spec names (it cannot be
                          replaced) or could not certify a gang in its rounds
    RUNNING -> QUEUED     only when a coordinator restart interrupted it and its workers did not
                          come back in time (partial results dropped)
Worker connections (WorkerState); a reconnecting worker gets a new connection:
    IDLE <-> BUSY;  IDLE | BUSY -> DISCONNECTED
    QUARANTINED is never a connection's state: a listing shows an idle worker QUARANTINED when its
    health record keeps it out of user jobs (coordinator/shell/facade.py, `listed_state`).
Warm groups (an initialised process group held by the executors of its members):
    FORMING -> WARM        its first job finished on every rank
    FORMING | WARM -> BROKEN   a member left, failed, restarted or was taken into another gang,
                           or a job on it did not succeed: every member is told to drop it
    BROKEN -> DESTROYED    no member holds it any more
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable

from ringleader.errors import RingleaderError
from ringleader.v1 import jobs_pb2 as pb


class IllegalTransition(RingleaderError):
    pass


@dataclass(frozen=True)
class Machine:
    name: str
    table: dict[Hashable, frozenset]  # state -> the states it may change to
    state_name: Callable[[Hashable], str] = str

    @property
    def terminal(self) -> frozenset:
        return frozenset(s for s, nxt in self.table.items() if not nxt)

    def allowed(self, frm, to) -> bool:
        return to in self.table.get(frm, ())

    def check(self, frm, to) -> None:
        if not self.allowed(frm, to):
            raise IllegalTransition(
                f"{self.name}: {self.state_name(frm)} -> {self.state_name(to)} is not an allowed transition")


def _job_name(state) -> str:
    return pb.JobState.Name(state)


JOBS = Machine("job", {
    pb.QUEUED: frozenset({pb.RUNNING, pb.CANCELLED, pb.FAILED}),
    pb.RUNNING: frozenset({pb.SUCCEEDED, pb.FAILED, pb.CANCELLED, pb.QUEUED}),
    pb.SUCCEEDED: frozenset(),
    pb.FAILED: frozenset(),
    pb.CANCELLED: frozenset(),
}, _job_name)

TERMINAL = tuple(sorted(JOBS.terminal))  # SUCCEEDED, FAILED, CANCELLED
UNFINISHED = (pb.QUEUED, pb.RUNNING)

WORKERS = Machine("worker", {
    pb.IDLE: frozenset({pb.BUSY, pb.DISCONNECTED}),
    pb.BUSY: frozenset({pb.IDLE, pb.DISCONNECTED}),
    pb.DISCONNECTED: frozenset(),
}, lambda s: pb.WorkerState.Name(s))

FORMING, WARM, BROKEN, DESTROYED = "forming", "warm", "broken", "destroyed"
GROUPS = Machine("warm group", {
    FORMING: frozenset({WARM, BROKEN}),
    WARM: frozenset({BROKEN}),
    BROKEN: frozenset({DESTROYED}),
    DESTROYED: frozenset(),
})


def is_terminal(state: int) -> bool:
    return state in TERMINAL
