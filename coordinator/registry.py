"""Registered worker daemons: what they are, their connection state, and the queue of messages
down their stream. Connection states change only through `WorkerConn.transition`
(ringleader.states.WORKERS: IDLE <-> BUSY, either -> DISCONNECTED)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from coordinator.scheduler import WorkerView
from ringleader import states
from ringleader.errors import AlreadyExists
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb


@dataclass
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

    @property
    def worker_id(self) -> str:
        return self.reg.worker_id

    @property
    def connected(self) -> bool:
        return self.state != pb.DISCONNECTED

    def transition(self, to: int, job_id: str = "", rank: int = 0) -> None:
        states.WORKERS.check(self.state, to)
        self.state, self.job_id, self.rank = to, job_id, rank

    def send(self, msg: wpb.CoordinatorMessage) -> None:
        self.outbox.put_nowait(msg)

    def view(self) -> WorkerView:
        d = self.reg.device
        return WorkerView(
            worker_id=self.worker_id, host=self.reg.host, device_type=d.type, device_index=d.index,
            device_name=d.name, memory_bytes=d.memory_bytes, backend=self.reg.backend,
            idle=self.state == pb.IDLE,
        )

    def info(self) -> pb.WorkerInfo:
        return pb.WorkerInfo(
            worker_id=self.worker_id, host=self.reg.host, address=self.reg.address,
            device=self.reg.device, backend=self.reg.backend, state=self.state, job_id=self.job_id,
            last_heartbeat=self.last_heartbeat_wall, connected_at=self.connected_at,
            warm_group=self.holds, executor_restarts=self.executor_restarts, version=self.reg.version,
            executor_health=self.executor_health,
        )


class WorkerRegistry:
    def __init__(self) -> None:
        self._workers: dict[str, WorkerConn] = {}

    def add(self, reg: wpb.Register) -> WorkerConn:
        old = self._workers.get(reg.worker_id)
        if old and old.connected:
            raise AlreadyExists(f"worker {reg.worker_id} is already connected")
        conn = WorkerConn(reg=reg, outbox=asyncio.Queue(), executor_restarts=reg.executor_restarts)
        self._workers[reg.worker_id] = conn
        return conn

    def get(self, worker_id: str) -> WorkerConn | None:
        return self._workers.get(worker_id)

    def connected(self) -> list[WorkerConn]:
        return [w for w in self._workers.values() if w.connected]

    def all(self) -> list[WorkerConn]:
        return sorted(self._workers.values(), key=lambda w: (w.reg.host, w.reg.device.index, w.worker_id))
