"""Queued jobs in the order of one time of theirs (submitted, or due to time out), for the first
only: what a scrape (the oldest queued job) and a tick (the queue timeouts due) ask, without a
walk of the queue.

A job that leaves the queue stays in the heap until it comes first, and is dropped then; when
such entries are most of the heap, it is built again from the queue."""

from __future__ import annotations

import heapq
from typing import Callable, Iterator, Mapping, TypeVar

Q = TypeVar("Q")


class QueueHeap:
    def __init__(self, queued: Mapping[str, Q], at: Callable[[Q], float]) -> None:
        self._queued, self._at = queued, at  # at(q) <= 0: not kept (no such time)
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        """Entries held, those of jobs gone from the queue included."""
        return len(self._heap)

    def add(self, job_id: str, q: Q) -> None:
        """After `job_id` joined the queue."""
        if (t := self._at(q)) <= 0:
            return
        if len(self._heap) > 2 * len(self._queued) + 64:  # mostly jobs gone: start again from the queue
            self._heap = [(t, i) for i, j in self._queued.items() if (t := self._at(j)) > 0]
            heapq.heapify(self._heap)
        else:
            heapq.heappush(self._heap, (t, job_id))

    def first(self) -> float:
        """The earliest time of a queued job (0.0: none)."""
        heap = self._heap
        while heap and heap[0][1] not in self._queued:
            heapq.heappop(heap)
        return heap[0][0] if heap else 0.0

    def due(self, now: float) -> Iterator[str]:
        """Take the queued jobs whose time is `now` or earlier, earliest first."""
        while self._heap and self._heap[0][0] <= now:
            _, job_id = heapq.heappop(self._heap)
            if job_id in self._queued:
                yield job_id
