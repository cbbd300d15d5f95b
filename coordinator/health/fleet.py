"""The health book: each worker's verdict with its evidence, cordons, and when to check again.

A worker is quarantined (kept out of user jobs; a spec naming it still runs there, for
diagnosis) while its verdict is failed (UNHEALTHY) or an operator cordoned it. A failed worker
is checked again on a backoff (RECHECK_MIN_S doubling to RECHECK_MAX_S); a passing recheck
lifts its quarantine. Verdicts are kept in the job store (JobStore.set_worker_health), so they
survive a coordinator restart.

`HealthBook` decides and remembers; it tells its caller which workers' quarantine changed and
calls nobody. `FleetHealth` keeps it in step with the coordinator through the facade's public
API: it listens to job events (a finished check gives verdicts) and turns quarantine changes
into `set_quarantine` calls (the coordinator keeps them by worker id, across reconnects).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Callable, Iterable

from coordinator.health import telemetry_rules, verdicts
from coordinator.store.api import JobStore
from coordinator.core.events import is_terminal
from ringleader import checks
from ringleader.defaults import PAGE_MAX
from ringleader.errors import NotFound
from ringleader.jobspec import check_text
from ringleader.v1 import jobs_pb2 as pb

log = logging.getLogger("ringleader.coordinator")

RECHECK_MIN_S = 60.0
RECHECK_MAX_S = 3600.0

Change = tuple[str, bool]  # (worker id, quarantined now)
# Told of each quarantine change: the worker (its host when connected, its health), after the change.
Observer = Callable[[pb.WorkerInfo], None]


def quarantined(h: pb.WorkerHealth) -> bool:
    return h.cordoned or h.verdict == pb.UNHEALTHY


class HealthBook:
    def __init__(self, store: JobStore, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock
        self._by_worker = store.worker_health()

    def get(self, worker_id: str) -> pb.WorkerHealth:
        """A copy of the worker's health (VERDICT_UNSPECIFIED when never checked)."""
        out = pb.WorkerHealth()
        if worker_id in self._by_worker:
            out.CopyFrom(self._by_worker[worker_id])
        return out

    def quarantined(self, worker_id: str) -> bool:
        return worker_id in self._by_worker and quarantined(self._by_worker[worker_id])

    def known(self) -> set[str]:
        return set(self._by_worker)

    def quarantined_ids(self) -> list[str]:
        return sorted(w for w, h in self._by_worker.items() if quarantined(h))

    def counts(self) -> Counter:
        """Workers per verdict name (HEALTHY, SUSPECT, UNHEALTHY), and CORDONED."""
        c = Counter(pb.Verdict.Name(h.verdict) for h in self._by_worker.values())
        c["CORDONED"] = sum(h.cordoned for h in self._by_worker.values())
        return c

    def record(self, found: dict[str, pb.WorkerHealth]) -> list[Change]:
        """Take a check's verdicts; returns the workers whose quarantine changed. A verdict replaces
        a worker's if it is as bad or worse, or comes from the same check (a recheck)."""
        changes = []
        for worker_id, new in found.items():
            old = self.get(worker_id)
            if new.verdict < old.verdict and new.check != old.check and old.check != "cordon":
                continue  # a better verdict from another check does not clear what this one found
            new = _copy(new)
            new.cordoned = old.cordoned
            if new.verdict == pb.UNHEALTHY:
                again = old.verdict == pb.UNHEALTHY and old.recheck_at > old.at
                interval = min(RECHECK_MAX_S, 2 * (old.recheck_at - old.at)) if again else RECHECK_MIN_S
                new.recheck_at = (new.at or self.clock()) + interval
            changes += self._put(worker_id, old, new)
        return changes

    def cordon(self, worker_id: str, on: bool) -> tuple[pb.WorkerHealth, list[Change]]:
        """Quarantine by hand, or lift it: uncordoning also lifts a failed verdict (the operator
        puts the worker back) to suspect, with a recheck due now."""
        old = self.get(worker_id)
        new = _copy(old)
        new.cordoned = on
        if not old.verdict and on:
            new.check, new.figure, new.at = "cordon", "quarantined by hand", self.clock()
        if not on and old.verdict == pb.UNHEALTHY:
            new.verdict, new.recheck_at = pb.SUSPECT, self.clock()
            new.expected = f"released by hand; before: {old.expected}"
        changes = self._put(worker_id, old, new)
        return self.get(worker_id), changes

    def due(self, now: float | None = None) -> list[str]:
        """Workers whose recheck is due (failed or released by hand), oldest first."""
        now = self.clock() if now is None else now
        waiting = [(h.recheck_at, w) for w, h in self._by_worker.items() if 0 < h.recheck_at <= now and not h.cordoned]
        return [w for _, w in sorted(waiting)]

    def _put(self, worker_id: str, old: pb.WorkerHealth, new: pb.WorkerHealth) -> list[Change]:
        self._by_worker[worker_id] = new
        self.store.set_worker_health(worker_id, new)
        return [(worker_id, quarantined(new))] if quarantined(new) != quarantined(old) else []


def _copy(h: pb.WorkerHealth) -> pb.WorkerHealth:
    out = pb.WorkerHealth()
    out.CopyFrom(h)
    return out


class FleetHealth:
    """The health book wired to a coordinator facade (`core`: coordinator/core/facade.py's
    Coordinator), through its public API only: add_listener, get, list_workers, set_quarantine."""

    def __init__(self, core, store: JobStore, clock: Callable[[], float] = time.time,
                 observers: Iterable[Observer] = ()) -> None:
        self.core = core
        self.book = HealthBook(store, clock)
        self.observers: tuple[Observer, ...] = ()
        core.add_listener(self._on_event)
        # The coordinator keeps quarantines by worker id, connected or not: after a restart it is
        # told again of every one the store kept, before any worker registers (observers are not:
        # no worker is connected yet, and they were told before the restart).
        self._apply([(worker_id, True) for worker_id in self.book.quarantined_ids()])
        self.observers = tuple(observers)
        self._telemetry_rules: dict[str, tuple] = {}  # worker -> the rules that fired on its last reading

    def _on_event(self, event: pb.JobEvent, job: pb.Job) -> None:
        if not is_terminal(event) or job.spec.WhichOneof("kind") not in checks.KINDS:
            return
        kind = job.spec.WhichOneof("kind")
        if job.state == pb.SUCCEEDED and not job.HasField(kind):
            job = self.core.get(job.id)  # the event's copy was trimmed: read the stored one
        self._apply(self.book.record(verdicts.of_job(job)))

    def telemetry(self, worker_id: str, readings) -> None:
        """A worker's GPU telemetry (a heartbeat's): its verdict recorded when the rules that fire
        change (not on every heartbeat), so an idle GPU that develops a fault is suspect at once."""
        found = telemetry_rules.verdicts(worker_id, readings)
        fired = tuple((f.rule, f.verdict) for f in found)
        before = self._telemetry_rules.get(worker_id)
        self._telemetry_rules[worker_id] = fired
        if fired == before or (before is None and not fired and self.book.get(worker_id).check != "telemetry"):
            return
        self._apply(self.book.record({worker_id: telemetry_rules.health(found, self.book.clock())}))

    def cordon(self, worker_id: str, on: bool) -> pb.WorkerInfo:
        """Quarantine a connected or remembered worker by hand, or lift it (NotFound if unknown)."""
        check_text("worker_id", worker_id)
        known = [w for w in self.all_workers() if w.worker_id == worker_id]
        if not known and worker_id not in self.book.known():
            raise NotFound(f"worker {worker_id} not found")
        _, changes = self.book.cordon(worker_id, on)
        self._apply(changes)
        info = next((w for w in self.all_workers() if w.worker_id == worker_id), None)
        info = info or pb.WorkerInfo(worker_id=worker_id, state=pb.DISCONNECTED)
        info.health.CopyFrom(self.book.get(worker_id))
        return info

    def all_workers(self) -> list[pb.WorkerInfo]:
        """Every worker the coordinator lists (all pages; list_workers fills in their health)."""
        out, token = [], ""
        while True:
            page = self.core.list_workers(limit=PAGE_MAX, page_token=token)
            out += page.workers
            token = page.next_page_token
            if not token:
                return out

    def _apply(self, changes: list[Change]) -> None:
        for worker_id, on in changes:
            log.warning("worker %s %s", worker_id, "quarantined" if on else "back in service")
            self.core.set_quarantine(worker_id, on)
        if self.observers and changes:
            connected = {w.worker_id: w for w in self.all_workers()}
            for worker_id, _ in changes:
                info = connected.get(worker_id) or pb.WorkerInfo(worker_id=worker_id, state=pb.DISCONNECTED)
                info.health.CopyFrom(self.book.get(worker_id))
                for observer in self.observers:
                    observer(info)
