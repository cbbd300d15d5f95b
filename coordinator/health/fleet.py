"""Fleet health as the facade shows it: a reader of the health book that the control core holds
(coordinator/health/book.py), the workers' listing with their health, cordons as inputs, and the
observers told of quarantine changes (the Kubernetes tainter, coordinator/health/k8s_taint.py).

Nothing here changes the book or calls into `Control.handle` from inside it: a check's verdicts
are applied by the control core in the input that ends the check, and observers are told by the
facade after that input, from `Out.health`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Iterable, Iterator

from ringleader.page_token import encode_token
from coordinator.health.book import HealthBook
from coordinator.health.sweeper import plan_answer
from ringleader.defaults import PAGE_MAX
from ringleader.v1 import jobs_pb2 as pb

log = logging.getLogger("ringleader.coordinator")

HOST_MAX = 64  # workers of one host looked at (a host has 8 GPUs; a CPU test bed a few more)
PAGE_SMALL = 250  # workers listed per turn of the loop by all_workers_paced (about 2-5 ms of it)

# Told of each quarantine or verdict change: the worker (its host when connected, its health), after the change.
Observer = Callable[[pb.WorkerInfo], None]


class FleetHealth:
    """The health side of a coordinator facade (`core`: coordinator/shell/facade.py's Coordinator),
    through its public API only: list_workers, workers, listed_state, cordon."""

    def __init__(self, core, observers: Iterable[Observer] = ()) -> None:
        self.core = core
        self.observers: tuple[Observer, ...] = tuple(observers)

    @property
    def book(self) -> HealthBook:
        return self.core.control.health

    def cordon(self, worker_id: str, on: bool, force: bool = False) -> pb.WorkerInfo:
        """Quarantine a connected or remembered worker by hand, or lift it (NotFound if unknown)."""
        return self.core.cordon(worker_id, on, force)

    def approve_return(self, worker_id: str) -> pb.WorkerInfo:
        """Let a repeat offender back after a pass (FailedPrecondition otherwise; NotFound if unknown)."""
        return self.core.cordon(worker_id, False, approve_return=True)

    def sweep_plan(self) -> pb.SweepPlanResponse:
        """The health sweeps' plan over the connected workers (SweepPlan, `ringleader check --plan`)."""
        ids = [c.worker_id for c in self.core.workers.connected()]
        return plan_answer(getattr(self, "sweeper", None), ids, time.monotonic())

    def on_host(self, host: str) -> list[pb.WorkerInfo]:
        """The workers listed on one host (a page from its place in the listing order, not a
        listing of the fleet)."""
        page = self.core.list_workers(limit=HOST_MAX, page_token=encode_token((host, -1, "")))
        return [w for w in page.workers if w.host == host]

    def all_workers(self) -> list[pb.WorkerInfo]:
        """Every worker the coordinator lists (all pages; list_workers fills in their health)."""
        return [w for page in self._pages(PAGE_MAX) for w in page]

    async def all_workers_paced(self, page: int = PAGE_SMALL) -> list[pb.WorkerInfo]:
        """`all_workers`, a page of `page` workers per turn of the loop: listing 5,000 at once held
        the loop 40-60 ms (RunCheck over a fleet), and users' calls with it. A worker that comes or
        goes meanwhile is listed as a page token finds it (once at most: pages follow list order)."""
        out: list[pb.WorkerInfo] = []
        for listed in self._pages(page):
            out += listed
            await asyncio.sleep(0)
        return out

    def _pages(self, limit: int) -> Iterator[list[pb.WorkerInfo]]:
        token = ""
        while True:  # each page is read as it is asked for
            page = self.core.list_workers(limit=limit, page_token=token)
            yield list(page.workers)
            token = page.next_page_token
            if not token:
                return

    def info(self, worker_id: str) -> pb.WorkerInfo:
        """The worker as listed (one lookup, not a listing), or a DISCONNECTED record with its
        health when the coordinator does not list it."""
        conn = self.core.workers.get(worker_id)
        if conn is None:
            info = pb.WorkerInfo(worker_id=worker_id, state=pb.DISCONNECTED)
        else:
            info = conn.info()
            info.state = self.core.listed_state(conn)
        info.health.CopyFrom(self.book.get(worker_id))
        return info

    def notify(self, worker_ids: list[str]) -> None:
        """Tell the observers of these workers' quarantine changes (after the input that made them)."""
        if not self.observers:
            return
        for worker_id in worker_ids:
            info = self.info(worker_id)
            for observer in self.observers:
                try:
                    observer(info)
                except Exception:  # an observer's bug must not undo the change or stop the others
                    log.exception("health observer failed for %s", worker_id)
