"""Registered worker daemons: what they are, their connection state, and the queue of messages
down their stream. Connection states change only through `WorkerConn.transition`
(ringleader.states.WORKERS; the control core uses IDLE <-> BUSY, any -> DISCONNECTED: a
listing shows an idle worker QUARANTINED when its health record says so); a connection reports leaving to the registry that made it, which keeps its index
of connected workers. The control core (coordinator/core/control.py) changes states and keeps the
scheduler's index beside each change.

A DISCONNECTED worker stays listed for `ttl_s` (so an operator sees who left), then `expire`
forgets it; a worker that comes back registers again. Listings are pages in (host, device
index, worker id) order, kept sorted as workers come and go, so a page costs no sort.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import operator
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from coordinator.core.scheduler import WorkerView
from coordinator.health import fingerprints
from ringleader import states
from ringleader.defaults import page_limit
from ringleader.errors import AlreadyExists, InvalidSpec
from ringleader.page_token import SortKey, decode_token, encode_token  # noqa: F401 - the listing's tokens
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

DEFAULT_TTL_S = 600.0
_HEARD = operator.attrgetter("last_heartbeat")



@dataclass(slots=True)  # slots: a heartbeat batch sets two fields on each of 50,000 a second
class WorkerConn:
    """One registered daemon's connection."""

    reg: wpb.Register
    outbox: asyncio.Queue  # CoordinatorMessage, drained by the servicer onto the stream
    connected_at: float = field(default_factory=time.time)
    last_heartbeat: float = field(default_factory=time.monotonic)
    last_heartbeat_wall: float = field(default_factory=time.time)
    state: int = pb.IDLE
    job_id: str = ""
    rank: int = 0
    holds: str = ""  # key of the process group its executor holds, as last reported
    executor_restarts: int = 0
    executor_health: int = pb.EXECUTOR_OK
    executor_detail: str = ""
    disconnected_at: float = 0.0  # monotonic time it left (DISCONNECTED)
    unwell_since: float = 0.0  # monotonic time its executor was first reported unwell (0: well)
    op_seq: int = 0  # its executor's op counter, as last reported
    registry: "WorkerRegistry | None" = field(default=None, repr=False)  # the one that made it
    # Set by the stream's servicer once it is attached (coordinator/edge/worker_stream.py): what the
    # core sends goes straight to the edge, with no task per worker waiting on `outbox`.
    route: "Callable[[object], None] | None" = field(default=None, repr=False)
    gang: str = ""  # what a gang needs equal of its fingerprint (coordinator/health/fingerprints.py)
    gpu_pids: tuple[int, ...] = ()  # its own processes on its GPU, as its last telemetry said (its word)

    def send(self, msg) -> None:
        """To the worker's stream (None ends it): by its route once attached, else into `outbox`."""
        if self.route is not None:
            self.route(msg)
        else:
            self.outbox.put_nowait(msg)

    @property
    def worker_id(self) -> str:
        return self.reg.worker_id

    @property
    def connected(self) -> bool:
        return self.state != pb.DISCONNECTED

    @property
    def sort_key(self) -> SortKey:
        return (self.reg.host, self.reg.device.index, self.worker_id)

    def transition(self, to: int, job_id: str = "", rank: int = 0, at: float | None = None) -> None:
        states.WORKERS.check(self.state, to)
        changed = to != self.state
        if changed and self.registry is not None:
            self.registry.moved(self, to)
        self.state, self.job_id, self.rank = to, job_id, rank
        if to == pb.DISCONNECTED and changed:
            self.disconnected_at = time.monotonic() if at is None else at  # at: the core's clock
            if self.registry is not None:
                self.registry.left(self)

    def view(self, quarantined: bool = False, trusted: bool = True) -> WorkerView:
        """The scheduler's view; `quarantined` is read from the health book (its one home)."""
        d = self.reg.device
        return WorkerView(
            worker_id=self.worker_id, host=self.reg.host, device_type=d.type, device_index=d.index,
            device_name=d.name, memory_bytes=d.memory_bytes, backend=self.reg.backend,
            idle=self.state == pb.IDLE, quarantined=quarantined, trusted=trusted, config=self.gang,
        )

    def info(self) -> pb.WorkerInfo:
        return pb.WorkerInfo(
            worker_id=self.worker_id, host=self.reg.host, address=self.reg.address,
            device=self.reg.device, backend=self.reg.backend, state=self.state, job_id=self.job_id,
            last_heartbeat=self.last_heartbeat_wall, connected_at=self.connected_at,
            warm_group=self.holds, executor_restarts=self.executor_restarts, version=self.reg.version,
            executor_health=self.executor_health, fingerprint=self.reg.fingerprint,
            config_drift=self.registry.configs.drift(self.worker_id) if self.registry is not None else "",
        )


def kind(reg: wpb.Register) -> tuple[str, str, str, int]:
    """What admission needs to know of a worker: backend, device type, name, memory."""
    return (reg.backend, reg.device.type, reg.device.name, reg.device.memory_bytes)


class WorkerRegistry:
    def __init__(self, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.ttl_s = ttl_s
        self._workers: dict[str, WorkerConn] = {}
        self._order: list[SortKey] = []  # every listed worker's sort key, sorted
        self._connected: dict[str, WorkerConn] = {}
        # Connected workers whose executor was last reported stopped or unresponsive (liveness.py).
        self.unwell: dict[str, WorkerConn] = {}
        self._kinds: collections.Counter[tuple] = collections.Counter()  # connected, by kind
        self._gone: collections.deque[tuple[float, str]] = collections.deque()  # (left at, id), in order
        # Listed workers by (state, backend), kept as they change: a scrape reads it, where a
        # walk of 5,000 workers each time held the loop (coordinator/edge/metrics.py).
        self.by_state: collections.Counter[tuple[int, str]] = collections.Counter()
        self.configs = fingerprints.FleetConfig()  # connected workers' fingerprints, by backend and model
        # Workers whose listing changed in a way a reader must see at once (registered, left,
        # forgotten: None, a state changed, its executor's health, a new health record), by id,
        # while someone follows (the edge's read feed: `follow`, `take_touched`); None: nobody does.
        self._touched: dict[str, WorkerConn | None] | None = None

    def add(self, reg: wpb.Register, mono: float | None = None, wall: float | None = None) -> WorkerConn:
        """`mono`, `wall`: when it connected (the control core's clock; None: read the clocks)."""
        old = self._workers.get(reg.worker_id)
        if old and old.connected:
            raise AlreadyExists(f"worker {reg.worker_id} is already connected")
        if old:
            self._unlist(old)
            self._count(old, -1)
        conn = WorkerConn(reg=reg, outbox=asyncio.Queue(), executor_restarts=reg.executor_restarts,
                          registry=self, gang=fingerprints.gang_key(reg.fingerprint))
        if mono is not None:
            conn.last_heartbeat = mono
        if wall is not None:
            conn.connected_at = conn.last_heartbeat_wall = wall
        self.configs.add(reg.worker_id, (reg.backend, reg.device.name), reg.fingerprint)
        self._reworded((reg.backend, reg.device.name))
        self._workers[reg.worker_id] = conn
        self._count(conn, 1)
        bisect.insort(self._order, conn.sort_key)
        self._connected[reg.worker_id] = conn
        self._kinds[kind(reg)] += 1
        self.touch(conn)
        return conn

    def follow(self) -> None:
        """Keep the touched workers from now on, for `take_touched` (one follower: the read feed)."""
        self._touched = {}

    def touch(self, conn: WorkerConn) -> None:
        """`conn`'s listing changed (its registration, state, leaving, executor's health)."""
        if self._touched is not None:
            self._touched[conn.worker_id] = conn

    def _reworded(self, group: tuple[str, str]) -> None:
        """A worker joined or left `group`: the words of those that differ from it count the others."""
        if self._touched is not None:
            for wid in self.configs.drifters(group):
                self.touch_id(wid)

    def touch_id(self, worker_id: str) -> None:
        """`touch` the worker of that id, if it is held here (its health record changed)."""
        if (conn := self._workers.get(worker_id)) is not None:
            self.touch(conn)

    def take_touched(self) -> dict[str, WorkerConn | None]:
        """The workers touched since the last take, by id (None: forgotten); empty when nobody follows."""
        out, self._touched = self._touched or {}, ({} if self._touched is not None else None)
        return out

    def get(self, worker_id: str) -> WorkerConn | None:
        return self._workers.get(worker_id)

    def connected(self) -> list[WorkerConn]:
        return list(self._connected.values())

    def sharing(self, conn: WorkerConn) -> list[WorkerConn]:
        """The other connected workers registered on `conn`'s host and CUDA device (a shared GPU),
        found in the listing order (host, device index, id) rather than a walk of the fleet."""
        d, host = conn.reg.device, conn.reg.host
        if d.type != "cuda":
            return []
        out, i = [], bisect.bisect_left(self._order, (host, d.index, ""))
        while i < len(self._order) and self._order[i][:2] == (host, d.index):
            other = self._workers[self._order[i][2]]
            if other is not conn and other.connected and other.reg.device.type == "cuda":
                out.append(other)
            i += 1
        return out

    def silent(self, before: float) -> list[WorkerConn]:
        """The connected workers last heard before `before` (monotonic). The oldest heartbeat is
        found in C (min with an attrgetter: 2-4 ms at 50,000 where a Python walk of every worker
        took 10-30 ms a clock tick); only when one is that old are they all looked at."""
        if not self._connected or min(self._connected.values(), key=_HEARD).last_heartbeat >= before:
            return []
        return [conn for conn in self._connected.values() if conn.last_heartbeat < before]

    def mark_unwell(self, conn: WorkerConn, unwell: bool) -> None:
        """Keep `unwell` (connected workers whose executor was last reported stopped or
        unresponsive) as a heartbeat reports `conn`'s executor."""
        if unwell and self._connected.get(conn.worker_id) is conn:
            self.unwell[conn.worker_id] = conn
        elif self.unwell.get(conn.worker_id) is conn:
            del self.unwell[conn.worker_id]

    def n_listed(self) -> int:
        return len(self._workers)

    def n_connected(self) -> int:
        return len(self._connected)

    def ids(self):
        """The ids of every worker held here (a live view of the keys: set operations in C)."""
        return self._workers.keys()

    def all(self) -> list[WorkerConn]:
        return [self._workers[key[2]] for key in self._order]

    def kinds(self) -> list[wpb.Register]:
        """One registration per kind of connected worker (backend, device type, name, memory):
        what submit-time admission needs to know of the fleet, without a scan of it."""
        return [wpb.Register(backend=backend, device=pb.Device(type=dtype, name=name, memory_bytes=memory))
                for backend, dtype, name, memory in self._kinds]

    def page(self, states_: Iterable[int] = (), limit: int = 0, token: str = "",
             state_of: Callable[[WorkerConn], int] = lambda c: c.state) -> tuple[list[WorkerConn], str]:
        """Workers in listing order after `token`, in any of `states_` (empty: all) as `state_of`
        shows them (QUARANTINED derives from the health book); returns them with the token of the
        next page ("" on the last)."""
        wanted, n = set(states_), page_limit(limit)
        start = bisect.bisect_right(self._order, decode_token(token)) if token else 0
        out: list[WorkerConn] = []
        for key in self._order[start:]:
            conn = self._workers[key[2]]
            if wanted and state_of(conn) not in wanted:
                continue
            if len(out) == n:
                return out, encode_token(out[-1].sort_key)
            out.append(conn)
        return out, ""

    def expire(self, now: float | None = None) -> list[str]:
        """Forget workers DISCONNECTED for longer than the TTL; returns their ids."""
        now = time.monotonic() if now is None else now
        gone: list[str] = []
        while self._gone and now - self._gone[0][0] > self.ttl_s:
            left_at, worker_id = self._gone.popleft()
            conn = self._workers.get(worker_id)
            # Skip a worker that came back (and maybe left again: its newer entry is behind).
            if conn is not None and not conn.connected and conn.disconnected_at == left_at:
                self._unlist(conn)
                self._count(conn, -1)
                del self._workers[worker_id]
                if self._touched is not None:
                    self._touched[worker_id] = None
                gone.append(worker_id)
        return gone

    def moved(self, conn: WorkerConn, to: int) -> None:
        """`conn` goes from its state to `to` (WorkerConn.transition, before it changes)."""
        if self._workers.get(conn.worker_id) is conn:
            self._count(conn, -1)
            self.by_state[(to, conn.reg.backend)] += 1
            self.touch(conn)

    def _count(self, conn: WorkerConn, n: int) -> None:
        key = (conn.state, conn.reg.backend)
        self.by_state[key] += n
        if not self.by_state[key]:
            del self.by_state[key]

    def left(self, conn: WorkerConn) -> None:
        """`conn` became DISCONNECTED (WorkerConn.transition tells the registry that made it)."""
        wid, k = conn.worker_id, kind(conn.reg)
        if self._connected.get(wid) is conn:
            del self._connected[wid]
            self._kinds[k] -= 1
            if not self._kinds[k]:
                del self._kinds[k]
            self._gone.append((conn.disconnected_at, wid))
            self.configs.remove(wid)
            self._reworded((conn.reg.backend, conn.reg.device.name))
            self.unwell.pop(wid, None)
            self.touch(conn)

    def _unlist(self, conn: WorkerConn) -> None:
        i = bisect.bisect_left(self._order, conn.sort_key)
        if i < len(self._order) and self._order[i] == conn.sort_key:
            del self._order[i]
