"""What the control core (coordinator/core/control.py) takes, and what it gives back.

Each input is one fact: a call from a user, a worker's registration, departure or message, a clock
tick, or a verdict that liveness (coordinator/core/liveness.py) worked out from the clock. `Control.handle`
applies one input and returns an `Out`: the messages to put on workers' streams, in order, and the
job events the change recorded. Inputs are values: nobody changes one once made (they are not
frozen only because a frozen dataclass costs twice as much to make, and a heartbeat is one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from coordinator.core.registry import WorkerConn
from ringleader.jobspec import ValidJob
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb


# ---- from users ------------------------------------------------------------------------------

@dataclass(slots=True)
class Submit:
    valid: ValidJob  # the checked spec (jobspec.normalize), admitted against the fleet
    request_id: str = ""


@dataclass(slots=True)
class Cancel:
    job_id: str
    reason: str = "cancelled by user"


# ---- from workers ----------------------------------------------------------------------------

@dataclass(slots=True)
class Register:
    reg: wpb.Register  # checked (admission.check_registration)


@dataclass(slots=True)
class Disconnect:
    conn: WorkerConn
    why: str


@dataclass(slots=True)
class WorkerMsg:
    conn: WorkerConn
    msg: wpb.WorkerMessage


@dataclass(slots=True)
class Alive:
    """Workers whose heartbeat came again unchanged, reported together by a worker relay (its ALIVE
    frame, coordinator/edge/relay.py): a heartbeat equal to the last one applied changes nothing
    but when the worker was last heard from."""
    conns: list[WorkerConn]  # heard now (the input's time: Control.handle's `now`)


# ---- from the clock and the operators --------------------------------------------------------

@dataclass(slots=True)
class Tick:
    now: float  # time.monotonic()
    wall: float = 0.0  # time.time() (0: read the clock), for queue timeouts against created_at
    # Workers' messages that reached the coordinator before this (monotonic) have all been applied
    # (0: all of them, `now`): a silence is counted up to here, not to `now` (liveness.verdicts).
    heard: float = 0.0


@dataclass(slots=True)
class Cordon:
    """An operator keeps user jobs off a worker (on) or lets it back (off; a worker whose latest
    verdict failed is rechecked first unless `force`). A job that names the worker in
    placement.worker_ids is still placed on it. It holds for the worker id (connected now or
    known to the health book), across reconnects; NotFound for an id neither knows."""

    worker_id: str
    on: bool
    force: bool = False
    approve_return: bool = False  # a person lets a repeat offender back after a pass (HealthBook.approve_return)


@dataclass(slots=True)
class Reload:
    """After a (re)start: queued jobs queue again; running ones wait until `reattach_deadline`
    (monotonic) for their workers to come back."""

    reattach_deadline: float


@dataclass(slots=True)
class Place:
    """Run the placement pass the inputs before asked for (`Out.place`): the facade's pacer feeds
    it once per turn of the loop, for all of that turn's inputs (coordinator/core/load.py)."""


# ---- verdicts liveness returns for a tick ----------------------------------------------------

@dataclass(slots=True)
class Lost:
    conn: WorkerConn
    why: str


@dataclass(slots=True)
class Fail:
    job_id: str
    reason: str


@dataclass(slots=True)
class Requeue:
    job_id: str
    why: str = "interrupted by a coordinator restart"


Input = Union[Submit, Cancel, Register, Disconnect, WorkerMsg, Alive, Tick, Cordon, Reload, Place, Lost, Fail,
              Requeue]

CLOSE = None  # sent in place of a message: end the worker's stream


@dataclass(slots=True)
class Out:
    """What one input did: `sends` in order ((conn, message), or (conn, CLOSE) to end a stream),
    the job events it recorded or published, the workers whose quarantine or verdict changed
    (`health`: for observers such as the Kubernetes tainter and the hooks, told after the input), alerts for an operator
    (the circuit breaker held a quarantine back), and what a call returns (`job`, `conn`)."""

    sends: list[tuple[WorkerConn, wpb.CoordinatorMessage | None]] = field(default_factory=list)
    events: list[tuple[pb.JobEvent, pb.Job]] = field(default_factory=list)  # for EventBus.tell, with their jobs
    health: list[str] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)
    job: pb.Job | None = None
    conn: WorkerConn | None = None
    place: bool = False  # a placement pass is due: feed `Place()`
    writes: list[tuple[str, tuple]] = field(default_factory=list)  # for the store, in order (writes.py)

    def then(self, later: "Out") -> "Out":
        """This input's Out followed by a later one's (a driver that places after each input)."""
        self.sends += later.sends
        self.events += later.events
        self.health += [w for w in later.health if w not in self.health]
        self.alerts += later.alerts
        self.writes += later.writes
        self.place = later.place
        return self
