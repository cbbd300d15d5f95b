"""The idle workers one placement pass has claimed (coordinator/core/scheduler.py), and the unclaimed
ones it counts per host: `Claims` and `HostPool`, used through coordinator/core/sched_index.py."""

from __future__ import annotations

import heapq
from typing import Any, Callable, Sequence

Kind = Any  # sched_index's Kind (that module imports this one): a worker's kind, hashable


class Claims:
    """Idle workers claimed during one pass: placed, or reserved by a job that must wait."""

    def __init__(self, free: int) -> None:
        self.ids: set[str] = set()
        self.at: dict[tuple[Kind, str], int] = {}  # claimed per kind and host
        self.of_kind: dict[Kind, int] = {}
        self.free = free  # idle workers left unclaimed
        self.version = 0  # takes so far (what was found unclaimed before one may be stale after)
        self._pools: dict[tuple[tuple[Kind, ...], str], HostPool] = {}
        self._pools_of: dict[Kind, list[HostPool]] = {}  # the pools each kind counts in

    def pool(self, kinds: tuple[Kind, ...], host: str, count: Callable[[], "HostPool"]) -> "HostPool":
        """The unclaimed idle workers of `kinds` (on `host` only, if set) per host: `count()`ed
        once a pass, then kept by `take`. Counting them for every need walked was O(hosts) a
        decision: 109 of Scheduler.place's 195 ms for 864 jobs on 3,000 idle workers (cProfile).
        Read it at once: a later take changes it."""
        counts = self._pools.get((kinds, host))
        if counts is None:
            counts = self._pools[(kinds, host)] = count()
            for kind in kinds:
                self._pools_of.setdefault(kind, []).append(counts)
        return counts

    def take_all(self, ws: Sequence[Any]) -> None:
        """Claim each of `ws` (a waiting gang's reservation takes hundreds a pass, in one call)."""
        ids, at, of_kind, pools_of = self.ids, self.at, self.of_kind, self._pools_of
        for w in ws:
            kind, host = w.kind, w.host
            ids.add(w.worker_id)
            at[(kind, host)] = at.get((kind, host), 0) + 1
            of_kind[kind] = of_kind.get(kind, 0) + 1
            for pool in pools_of.get(kind, ()):
                if host in pool:
                    pool.took(host)
        self.version += len(ws)
        self.free -= len(ws)

    def take(self, w: Any) -> None:
        self.take_all((w,))


class HostPool(dict):
    """Idle, unclaimed workers per host (host -> count) for one pass, with their `total`, and the
    fullest hosts first without sorting every host for each job (a lazy heap: counts only fall
    during a pass, so a popped entry above its host's count is pushed again at the count)."""

    def __init__(self, counts: dict[str, int], doubtful: dict[str, int]) -> None:
        super().__init__(counts)
        self.total = sum(counts.values())
        self._doubtful = doubtful
        self._heap: list[tuple[int, int, str]] | None = None

    def took(self, host: str) -> None:
        self.total -= 1
        if self[host] > 1:
            self[host] -= 1
        else:
            del self[host]

    def fullest(self, want: int) -> list[str]:
        """The hosts with the most workers (among equals, fewer idle workers whose latest verdict
        is not HEALTHY: the fleet's `doubtful`), as many as hold `want` workers."""
        if self._heap is None:
            self._heap = [(-k, self._doubtful.get(h, 0), h) for h, k in self.items()]
            heapq.heapify(self._heap)
        hosts: list[tuple[int, int, str]] = []
        while want > 0 and self._heap:
            k, d, h = heapq.heappop(self._heap)
            if -k != self.get(h, 0):  # stale: the count fell since
                if h in self:
                    heapq.heappush(self._heap, (-self[h], d, h))
                continue
            hosts.append((k, d, h))
            want += k
        for entry in hosts:
            heapq.heappush(self._heap, entry)
        return [h for _, _, h in hosts]
