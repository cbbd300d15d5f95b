"""Fleet health inside the control core: the half of `Control` (coordinator/core/control.py) that
applies check verdicts and cordons to the health book (coordinator/health/book.py) it holds.

A check job's verdicts are applied in the input that ends the job (`_verdicts`, from `end`), so
the placement pass at the end of that input already sees the quarantine; a cordon is an input
(`Cordon`). A quarantine change re-indexes the worker for the scheduler (its view reads the
book) and is listed in `Out.health`, for observers told after the input.
"""

from __future__ import annotations

import logging

from coordinator.core.inputs import Cordon, Out
from coordinator.core.jobs import Running
from coordinator.health import verdicts
from coordinator.health.book import Change, HealthBook
from ringleader.errors import NotFound
from ringleader.jobspec import check_text

log = logging.getLogger("ringleader.coordinator")


class HealthProtocol:
    """Methods of `Control`, which owns the state they read and change."""

    _out: Out
    health: HealthBook

    def _cordon(self, inp: Cordon) -> None:
        check_text("worker_id", inp.worker_id)
        if self.workers.get(inp.worker_id) is None and inp.worker_id not in self.health.known():
            raise NotFound(f"worker {inp.worker_id} not found")
        self._health_changed(self.health.cordon(inp.worker_id, inp.on, inp.force))
        if not inp.on and inp.force:
            log.warning("worker %s put back in service by hand (--force), over its verdict", inp.worker_id)

    def _verdicts(self, rj: Running) -> None:
        """Apply what a finished check found, before this input's placement pass."""
        found = verdicts.of_job(rj.job)
        if not found:
            return
        model_of = {c.worker_id: c.reg.device.name for c in self.workers.connected()}
        self._health_changed(self.health.record(found, model_of))
        held = [w for w in sorted(found) if self.health.get(w).breaker_held]
        if held:
            alert = (f"circuit breaker: {', '.join(held)} failed {rj.job.spec.WhichOneof('kind')} but automatic "
                     f"quarantine already holds {self.health.max_share:.0%} of their GPU model's workers; "
                     f"left in service for an operator to decide (`ringleader workers cordon ID`)")
            log.error("%s", alert)
            self._out.alerts.append(alert)

    def _health_changed(self, changes: list[Change]) -> None:
        for worker_id, on in changes:
            log.warning("worker %s %s", worker_id, "quarantined" if on else "back in service")
            conn = self.workers.get(worker_id)
            if conn is not None and conn.connected:
                self._index(conn)
                self._dirty = True  # a worker left or rejoined the pool user jobs draw from
            self._out.health.append(worker_id)
