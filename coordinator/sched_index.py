"""The indexes the scheduler (coordinator/scheduler.py) keeps, so a pass rescans neither the
queue nor the fleet: connected workers by kind and host, queued jobs of one need in queue order,
and the workers one pass has claimed."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Hashable

Kind = tuple[str, str, str, int]  # backend, device type, device name, memory bytes


@dataclass(frozen=True)
class WorkerView:
    worker_id: str
    host: str
    device_type: str
    device_index: int
    device_name: str
    memory_bytes: int
    backend: str
    idle: bool

    @property
    def kind(self) -> Kind:
        return (self.backend, self.device_type, self.device_name, self.memory_bytes)


@dataclass
class QueueGroup:
    """Queued jobs of one Need, in queue order (a heap with lazy deletion)."""

    need: Hashable  # the scheduler's Need
    heap: list[tuple[tuple, str]] = field(default_factory=list)
    live: dict[str, tuple] = field(default_factory=dict)  # job id -> its order
    epoch: int = -1  # the fleet epoch `connected` was counted at
    connected: dict[str, int] = field(default_factory=dict)  # backend -> eligible connected workers
    seen_pass: int = 0  # the last pass in which its first job could not start ...
    blocked: str = ""  # ... that job ...
    seen_idle: int = 0  # ... and the eligible idle workers it saw (and reserved)

    def push(self, job_id: str, order: tuple) -> None:
        self.live[job_id] = order
        heapq.heappush(self.heap, (order, job_id))

    def head(self) -> str:
        while self.heap[0][1] not in self.live or self.live[self.heap[0][1]] != self.heap[0][0]:
            heapq.heappop(self.heap)
        return self.heap[0][1]

    def discard(self, job_id: str) -> None:
        self.live.pop(job_id, None)
        if len(self.heap) > 2 * len(self.live) + 64:  # many cancelled behind the head: compact
            self.heap = [(o, j) for j, o in self.live.items()]
            heapq.heapify(self.heap)


class FleetIndex:
    """Connected workers by kind and host; idle ones by kind, host and id."""

    def __init__(self) -> None:
        self.views: dict[str, WorkerView] = {}
        self.hosts: dict[Kind, dict[str, int]] = {}  # connected workers per kind and host
        self.totals: dict[Kind, int] = {}
        self.idle: dict[Kind, dict[str, dict[str, WorkerView]]] = {}
        self.n_idle = 0
        self.epoch = 0  # changes whenever the connected set does (not on idle <-> busy)

    def put(self, w: WorkerView) -> None:
        old = self.views.get(w.worker_id)
        if old is None or (old.kind, old.host) != (w.kind, w.host):
            self.drop(w.worker_id)
            self.epoch += 1
            by_host = self.hosts.setdefault(w.kind, {})
            by_host[w.host] = by_host.get(w.host, 0) + 1
            self.totals[w.kind] = self.totals.get(w.kind, 0) + 1
        elif old.idle:
            self._unidle(old)
        self.views[w.worker_id] = w
        if w.idle:
            self.idle.setdefault(w.kind, {}).setdefault(w.host, {})[w.worker_id] = w
            self.n_idle += 1

    def drop(self, worker_id: str) -> None:
        w = self.views.pop(worker_id, None)
        if w is None:
            return
        self.epoch += 1
        if w.idle:
            self._unidle(w)
        by_host = self.hosts[w.kind]
        by_host[w.host] -= 1
        if not by_host[w.host]:
            del by_host[w.host]
        self.totals[w.kind] -= 1
        if not self.totals[w.kind]:
            del self.totals[w.kind], self.hosts[w.kind]

    def _unidle(self, w: WorkerView) -> None:
        by_host = self.idle[w.kind]
        del by_host[w.host][w.worker_id]
        if not by_host[w.host]:
            del by_host[w.host]
            if not by_host:
                del self.idle[w.kind]
        self.n_idle -= 1


class Claims:
    """Idle workers claimed during one pass: placed, or reserved by a job that must wait."""

    def __init__(self, free: int) -> None:
        self.ids: set[str] = set()
        self.at: dict[tuple[Kind, str], int] = {}  # claimed per kind and host
        self.free = free  # idle workers left unclaimed

    def take(self, w: WorkerView) -> None:
        self.ids.add(w.worker_id)
        self.at[(w.kind, w.host)] = self.at.get((w.kind, w.host), 0) + 1
        self.free -= 1
