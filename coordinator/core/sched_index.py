"""The indexes the scheduler (coordinator/core/scheduler.py) keeps, so a pass rescans neither the
queue nor the fleet: connected workers by kind and host (with the eligible ones a need can use,
counted per kind rather than per worker), queued jobs of one need in queue order, and the
workers one pass has claimed.

A need here is the scheduler's Need: anything with world_size, host, worker_ids,
fits(kind) (eligibility apart from host and ids) and admits(worker).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Hashable, Iterable, Iterator

from coordinator.core.claims import Claims, HostPool

# backend, device type, device name, memory bytes, quarantined (a kind of its own: only a job
# that names such a worker may use it), and what a gang needs equal of the worker's configuration
# (coordinator/health/fingerprints.py's gang_key)
Kind = tuple[str, str, str, int, bool, str]
# What one gang is drawn from: a backend and a configuration key. Workers of two lanes never share
# a gang, as workers of two backends never did.
Lane = tuple[str, str]


def lane(kind: Kind) -> Lane:
    return (kind[0], kind[5])


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
    quarantined: bool = False
    trusted: bool = True  # its latest verdict is HEALTHY: preferred over suspect or never-checked workers
    config: str = ""  # fingerprints.gang_key of its registration

    @cached_property
    def kind(self) -> Kind:  # kept: a walk of a fleet-wide check's list asks it of every worker
        return (self.backend, self.device_type, self.device_name, self.memory_bytes, self.quarantined, self.config)

    @property
    def lane(self) -> Lane:
        return (self.backend, self.config)


@dataclass
class QueueGroup:
    """Queued jobs of one Need, in queue order (a heap with lazy deletion)."""

    need: Hashable  # the scheduler's Need
    heap: list[tuple[tuple, str]] = field(default_factory=list)
    live: dict[str, tuple] = field(default_factory=dict)  # job id -> its order
    epoch: int = -1  # the fleet epoch `connected` was counted at
    connected: dict[Lane, int] = field(default_factory=dict)  # lane -> eligible connected workers
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
        self.idle_n: dict[Kind, int] = {}  # idle workers per kind
        self.n_idle = 0
        self.doubtful: dict[str, int] = {}  # idle workers per host that are not `trusted`
        self.epoch = 0  # changes whenever the connected set does (not on idle <-> busy)
        self.kinds_epoch = 0  # changes whenever a kind appears or goes
        self._listed_memo: dict[tuple[int, str], tuple] = {}  # listed_idle's, for one pass's claims

    def put(self, w: WorkerView) -> None:
        old = self.views.get(w.worker_id)
        if old is None or (old.kind, old.host) != (w.kind, w.host):
            self.drop(w.worker_id)
            self.epoch += 1
            if w.kind not in self.totals:
                self.kinds_epoch += 1
            by_host = self.hosts.setdefault(w.kind, {})
            by_host[w.host] = by_host.get(w.host, 0) + 1
            self.totals[w.kind] = self.totals.get(w.kind, 0) + 1
        elif old.idle:
            self._unidle(old)
        self.views[w.worker_id] = w
        if w.idle:
            self.idle.setdefault(w.kind, {}).setdefault(w.host, {})[w.worker_id] = w
            self.idle_n[w.kind] = self.idle_n.get(w.kind, 0) + 1
            self.n_idle += 1
            if not w.trusted:
                self.doubtful[w.host] = self.doubtful.get(w.host, 0) + 1

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
            self.kinds_epoch += 1

    def connected(self, need: Any, backends: tuple[str, ...]) -> dict[Lane, int]:
        """Connected workers `need` admits, per lane (of `backends`), in the order of `backends`."""
        counts: dict[Lane, int] = {}
        if need.worker_ids:
            for w in (self.views.get(wid) for wid in need.worker_ids):
                if w is not None and w.backend in backends and need.admits(w):
                    counts[w.lane] = counts.get(w.lane, 0) + 1
        else:
            for kind, by_host in self.hosts.items():
                if kind[0] in backends and need.fits(kind):
                    k = by_host.get(need.host, 0) if need.host else self.totals[kind]
                    counts[lane(kind)] = counts.get(lane(kind), 0) + k
        order = {b: i for i, b in enumerate(backends)}
        return dict(sorted(counts.items(), key=lambda kv: (order[kv[0][0]], -kv[1], kv[0][1])))

    def idle_hosts(self, need: Any, backend: Lane, claims: Claims) -> HostPool:
        """Idle, unclaimed workers of the lane `backend` that `need` admits, counted per host."""
        counts: dict[str, int] = {}
        if need.worker_ids:
            for w in self.listed_idle(need, backend, claims):
                counts[w.host] = counts.get(w.host, 0) + 1
            return HostPool(counts, self.doubtful)
        kinds = tuple(k for k in self.idle if lane(k) == backend and need.fits(k))
        return claims.pool(kinds, need.host,
                           lambda: HostPool(self._count_idle(kinds, need.host, claims), self.doubtful))

    def _count_idle(self, kinds: tuple[Kind, ...], host: str, claims: Claims) -> dict[str, int]:
        counts: dict[str, int] = {}
        for kind in kinds:
            by_host = self.idle[kind]
            for h in ((host,) if host else by_host):
                left = len(by_host.get(h, ())) - claims.at.get((kind, h), 0)
                if left > 0:
                    counts[h] = counts.get(h, 0) + left
        return counts

    def idle_on(self, need: Any, backend: Lane, host: str, claims: Claims) -> list[WorkerView]:
        """Those workers on one host, trusted ones first, then by device index."""
        if need.worker_ids:
            ws = [w for w in self.listed_idle(need, backend, claims) if w.host == host]
        else:
            ws = [w for kind, by_host in self.idle.items() if lane(kind) == backend and need.fits(kind)
                  for w in by_host.get(host, {}).values() if w.worker_id not in claims.ids]
        return sorted(ws, key=lambda w: (not w.trusted, w.device_index, w.worker_id))

    def idle_in(self, need: Any, backend: Lane, hosts: Any, claims: Claims) -> list[WorkerView]:
        """`idle_on` for each of `hosts` in turn. A job that names its workers (a check naming a
        whole fleet) has its list walked once, not once per host: O(n), never O(n x hosts)."""
        if not need.worker_ids:
            return [w for h in hosts for w in self.idle_on(need, backend, h, claims)]
        on: dict[str, list[WorkerView]] = {}
        for w in self.listed_idle(need, backend, claims):
            on.setdefault(w.host, []).append(w)
        return [w for h in hosts for w in sorted(on.get(h, ()), key=lambda w: (w.device_index, w.worker_id))]

    def listed_idle(self, need: Any, backend: Lane, claims: Claims) -> list[WorkerView]:
        """The idle, unclaimed workers of a job's list that it admits on `backend`: `_walk_listed`,
        once per need and backend for as long as the pass's claims stand still (a waiting job's
        pools, pick and reservation all ask for it)."""
        key = (id(need), backend)
        memo = self._listed_memo.get(key)
        if memo is not None and memo[0] is claims and memo[1] == claims.version and memo[2] is need:
            return memo[3]
        ws = self._walk_listed(need, backend, claims)
        if len(self._listed_memo) > 64:
            self._listed_memo.clear()
        self._listed_memo[key] = (claims, claims.version, need, ws)
        return ws

    def _walk_listed(self, need: Any, backend: Lane, claims: Claims) -> list[WorkerView]:
        """The idle, unclaimed workers of a job's list, walking the shorter side: the list, or the
        idle workers of the kinds it fits. A fleet-wide check names thousands while a busy fleet
        has a few idle: walking its list every pass was a quarter of a draining coordinator's CPU
        (churn, 5,000 workers). In no particular order: its users count them, or sort
        them by host and device."""
        kinds = [k for k in self.idle if lane(k) == backend and need.fits(k)]
        taken, host = claims.ids, need.host
        if sum(self.idle_n.get(k, 0) for k in kinds) < len(need.worker_ids):
            listed = need.listed_at
            return [w for k in kinds for by_host in self.idle[k].values() for w in by_host.values()
                    if w.worker_id in listed and w.worker_id not in taken and (not host or w.host == host)]
        # `need.admits` for each listed worker, with its kind's fit decided once per kind: an
        # idle worker's kind is one of `kinds` exactly when its backend and kind fit.
        fit = set(kinds)
        return [w for w in map(self.views.get, need.worker_ids) if w is not None and w.idle and w.kind in fit
                and w.worker_id not in taken and (not host or w.host == host)]

    def _unidle(self, w: WorkerView) -> None:
        by_host = self.idle[w.kind]
        del by_host[w.host][w.worker_id]
        if not by_host[w.host]:
            del by_host[w.host]
            if not by_host:
                del self.idle[w.kind], self.idle_n[w.kind]
        if w.kind in self.idle_n:
            self.idle_n[w.kind] -= 1
        self.n_idle -= 1
        if not w.trusted:
            self.doubtful[w.host] -= 1
            if not self.doubtful[w.host]:
                del self.doubtful[w.host]


class KindQueues:
    """For each connected kind of worker, the needs that fit it, by the order of their first
    queued job (heaps with lazy deletion): a pass walks, in queue order, only the needs that fit
    a kind with idle workers left, and the others cost it nothing."""

    def __init__(self) -> None:
        self.heaps: dict[Kind, list[tuple[tuple, Any]]] = {}

    def rebuild(self, kinds: Iterable[Kind], heads: dict[Any, tuple]) -> None:
        """Start again from every need's first job (`heads`: need -> its order)."""
        self.heaps = {k: [(order, need) for need, order in heads.items() if need.fits(k)] for k in kinds}
        for heap in self.heaps.values():
            heapq.heapify(heap)

    def size(self) -> int:
        return sum(len(h) for h in self.heaps.values())

    def push(self, need: Any, order: tuple) -> None:
        """`need` has a new first job, of this order."""
        for kind, heap in self.heaps.items():
            if need.fits(kind):
                heapq.heappush(heap, (order, need))

    def walk(self, kinds: Callable[[], list[Kind]], head: Callable[[Any], tuple | None]) -> Iterator[Any]:
        """Needs fitting any of `kinds()` (asked again at each step), in the order of their first
        job, each first job once; `head(need)` is the order of its first job now (None: none).
        The caller may add and remove jobs between steps; close the walk when done."""
        taken: list[tuple[Kind, tuple, Any]] = []  # entries popped and still current: put back
        seen: set[tuple] = set()
        try:
            while True:
                best = None
                for kind in kinds():
                    heap = self.heaps[kind]
                    while heap and (heap[0][0] in seen or head(heap[0][1]) != heap[0][0]):
                        order, need = heapq.heappop(heap)
                        if order in seen:
                            taken.append((kind, order, need))
                    if heap and (best is None or heap[0][0] < best[1]):
                        best = (kind, heap[0][0])
                if best is None:
                    return
                order, need = heapq.heappop(self.heaps[best[0]])
                taken.append((best[0], order, need))
                seen.add(order)
                yield need
        finally:
            for kind, order, need in taken:
                if head(need) == order and kind in self.heaps:
                    heapq.heappush(self.heaps[kind], (order, need))
