"""The health book: each worker's verdict with its evidence, cordons, and when to check again.

State of the control core (coordinator/core/control.py's `Control` holds it beside the job book
and the registry): it decides and remembers, and calls nobody. `Control` feeds it the verdicts of
a check job in the same input that ends the job, and cordons as inputs; the scheduler's view of a
worker reads `quarantined` from here, the one fact of a worker's quarantine.

A worker is quarantined (kept out of user jobs; a spec naming it still runs there, for
diagnosis) while its verdict is failed (UNHEALTHY) or an operator cordoned it. A failed worker
is checked again on a backoff per worker (RECHECK_MIN_S, doubling per recheck up to
RECHECK_MAX_S); a passing recheck lifts its quarantine. Verdicts are kept in the job store
(JobStore.set_worker_health), so they survive a coordinator restart.

Observe mode (`observe`, `ringleader coordinator --health-observe`): verdicts are recorded, shown,
alerted and measured as ever, but a failed verdict quarantines nothing (a cordon by hand still
does), so an operator can adopt fleet health on a live fleet and compare what it would have done.

The circuit breaker: automatic quarantine never takes more than `max_share` of one GPU model's
workers (at least one). A failed verdict beyond that share is recorded with `breaker_held` set:
the worker stays in service and `held_ids` names it for an operator, who decides (cordon).

Repeat offenders: a worker whose automatic quarantine began REPEAT_LIMIT times within
REPEAT_WINDOW_S stays out (`validate_needs_approval`) whatever later checks say, until a person
approves its return after a pass (`approve_return`; `ringleader workers approve-return ID`).
"""

from __future__ import annotations

import collections
import math
import time
from collections import Counter
from typing import Callable, Mapping

from coordinator.health.crashes import CHECK as CRASH, CrashLog
from coordinator.store.api import JobStore
from ringleader import checks
from ringleader.errors import FailedPrecondition
from ringleader.v1 import jobs_pb2 as pb

RECHECK_MIN_S = 60.0
RECHECK_MAX_S = 3600.0
DEFAULT_MAX_SHARE = 0.10
ALSO_MAX = 512  # characters of other checks' standing findings kept beside a verdict
REPEAT_LIMIT = 3  # automatic quarantines within REPEAT_WINDOW_S that keep a worker out until approved
REPEAT_WINDOW_S = 24 * 3600.0

Change = tuple[str, bool]  # (worker id, quarantined now)


def quarantined(h: pb.WorkerHealth) -> bool:
    return h.cordoned or h.validate_needs_approval or (h.verdict == pb.UNHEALTHY and not h.breaker_held)


JOBS_KEPT = 4096  # check jobs whose verdicts stay readable (a fleet-wide sweep's gangs and then some)


class HealthBook:
    def __init__(self, store: JobStore, clock: Callable[[], float] = time.time,
                 max_share: float = DEFAULT_MAX_SHARE, observe: bool = False) -> None:
        if not 0 <= max_share <= 1:
            raise ValueError(f"quarantine_max_share must be between 0 and 1, got {max_share}")
        self.store = store
        self.clock = clock
        self.max_share = max_share
        self.observe = observe
        self._by_worker = store.worker_health()
        # Passing verdicts of each check kind, by worker (wall time): what preflight certifies by.
        # Memory only: after a restart a preflight checks again.
        self._passed: dict[str, dict[str, float]] = {}
        # The current recheck wait of each failed worker (after a restart: recheck_at - at).
        self._waits: dict[str, float] = {}
        # The telemetry rules that fired on each worker's last reading (a verdict only on a change).
        self.telemetry_fired: dict[str, tuple] = {}
        # Each recent check job's verdicts as recorded (job id -> worker id -> health), for the
        # answer of a RunCheck that waited (`ringleader validate` prints these, not a recompute).
        self.by_job: collections.OrderedDict[str, dict[str, pb.WorkerHealth]] = collections.OrderedDict()
        self.crashes = CrashLog()  # each worker's recent crashes, its own reports (coordinator/health/crashes.py)
        self.changed: Callable[[str], None] = lambda worker_id: None  # told each record replaced (by id)

    def get(self, worker_id: str) -> pb.WorkerHealth:
        """A copy of the worker's health (VERDICT_UNSPECIFIED when never checked)."""
        out = pb.WorkerHealth()
        if worker_id in self._by_worker:
            out.CopyFrom(self._by_worker[worker_id])
        return out

    def shown(self, worker_id: str) -> pb.WorkerHealth:
        """`get`, as listings show it: a failed verdict marked observed-only in observe mode."""
        out = self.get(worker_id)
        out.observe_only = self.observe and out.verdict == pb.UNHEALTHY
        return out

    def _held(self, h: pb.WorkerHealth) -> bool:
        """Whether `h` keeps its worker out of user jobs (in observe mode: a cordon only)."""
        return h.cordoned if self.observe else quarantined(h)

    def peek(self, worker_id: str) -> pb.WorkerHealth | None:
        """The worker's health record itself, not a copy (None: never checked), for a reader that
        only reads it: the dashboard's fleet feed reads every worker's once a second. A record is
        replaced (_put), never changed in place, so a reader may tell a change by identity."""
        return self._by_worker.get(worker_id)

    def quarantined(self, worker_id: str) -> bool:
        h = self._by_worker.get(worker_id)
        return h is not None and self._held(h)

    def cordoned_ids(self) -> list[str]:
        """Workers an operator cordoned (a few; the waiting reasons count them apart)."""
        return [w for w, h in self._by_worker.items() if h.cordoned]

    def verdict(self, worker_id: str) -> int:
        h = self._by_worker.get(worker_id)
        return h.verdict if h is not None else pb.VERDICT_UNSPECIFIED

    def known(self) -> set[str]:
        return set(self._by_worker)

    def keep_job_verdicts(self, job_id: str, found: Mapping[str, pb.WorkerHealth]) -> None:
        """What a check job found, as recorded: read back by `job_verdicts` (bounded, oldest out)."""
        self.by_job[job_id] = {w: pb.WorkerHealth(verdict=h.verdict, figure=h.figure, expected=h.expected,
                                                  check=h.check, job_id=job_id, finding=h.finding)
                               for w, h in found.items()}
        while len(self.by_job) > JOBS_KEPT:
            self.by_job.popitem(last=False)

    def job_verdicts(self, job_id: str) -> dict[str, pb.WorkerHealth]:
        return self.by_job.get(job_id, {})

    def quarantined_ids(self) -> list[str]:
        return sorted(w for w, h in self._by_worker.items() if self._held(h))

    def held_ids(self) -> list[str]:
        """Failed workers the circuit breaker left in service: an operator's decision."""
        return sorted(w for w, h in self._by_worker.items() if h.breaker_held and not h.cordoned)

    def counts(self) -> Counter:
        """Workers per verdict name (HEALTHY, SUSPECT, UNHEALTHY), CORDONED and BREAKER_HELD."""
        c = Counter(pb.Verdict.Name(h.verdict) for h in self._by_worker.values())
        c["CORDONED"] = sum(h.cordoned for h in self._by_worker.values())
        c["BREAKER_HELD"] = len(self.held_ids())
        return c

    def certified(self, worker_id: str, kinds: tuple[str, ...], since: float) -> bool:
        """Whether the worker passed each of `kinds` at or after `since` (wall time) and is not
        failed since."""
        passed = self._passed.get(worker_id, {})
        return (self.observe or self.verdict(worker_id) != pb.UNHEALTHY) and all(passed.get(k, -1.0) >= since for k in kinds)

    def record(self, found: dict[str, pb.WorkerHealth], model_of: Mapping[str, str] = {}) -> list[Change]:
        """Take a check's verdicts; returns the workers whose quarantine changed. A verdict replaces
        a worker's if it is as bad or worse, or comes from the same check (a recheck). `model_of`:
        the GPU model of every connected worker, for the circuit breaker's share."""
        changes = []
        for worker_id, new in sorted(found.items()):
            old = self.get(worker_id)
            if new.verdict == pb.HEALTHY or self.observe:  # observe mode: checked is certified
                self._passed.setdefault(worker_id, {})[new.check] = new.at or self.clock()
            else:
                self._passed.get(worker_id, {}).pop(new.check, None)
            if new.verdict < old.verdict and new.check != old.check and old.check != "cordon" and not (
                    old.check == CRASH and new.check in checks.KINDS):  # a passing check clears crash evidence
                continue  # a better verdict from another check does not clear what this one found
            new = _copy(new)
            new.cordoned = old.cordoned
            new.also = _standing(old, new)
            if new.verdict == pb.UNHEALTHY:
                new.recheck_at = self._next_recheck(worker_id, old, new.at or self.clock())
                new.breaker_held = not self.observe and not quarantined(old) and not self._room(worker_id, model_of)
            changes += self._put(worker_id, old, new)
        return changes

    def _next_recheck(self, worker_id: str, old: pb.WorkerHealth, at: float) -> float:
        """Backoff per worker: the wait doubles once per recheck (a verdict at or after the due
        time), not once per failing check kind of one sweep, which keeps the time already set."""
        if old.verdict != pb.UNHEALTHY or old.recheck_at <= old.at:
            wait = RECHECK_MIN_S
        elif at < old.recheck_at:
            return old.recheck_at
        else:
            wait = min(RECHECK_MAX_S, 2 * self._waits.get(worker_id, old.recheck_at - old.at))
        self._waits[worker_id] = wait
        return at + wait

    def _room(self, worker_id: str, model_of: Mapping[str, str]) -> bool:
        """Whether automatic quarantine may take one more worker of this one's GPU model."""
        model = model_of.get(worker_id)
        if model is None:  # not connected: it takes no user job anyway
            return True
        fleet = [w for w, m in model_of.items() if m == model]
        limit = max(1, math.floor(self.max_share * len(fleet) + 1e-9))
        return sum(self.quarantined(w) for w in fleet) < limit

    def cordon(self, worker_id: str, on: bool, force: bool = False) -> list[Change]:
        """Quarantine by hand, or lift it. Uncordoning a worker whose latest verdict failed makes
        its recheck due now and keeps it out until the recheck passes; with `force` the operator
        overrides the verdict: it becomes suspect, back in service, and no recheck is due (the
        next sweep or check judges it again)."""
        old = self.get(worker_id)
        new = _copy(old)
        new.cordoned = on
        if not old.verdict and on:
            new.check, new.figure, new.at = "cordon", "quarantined by hand", self.clock()
        if not on and old.verdict == pb.UNHEALTHY:
            new.recheck_at = self.clock()
            if force or old.breaker_held:  # the operator's decision stands until a check says otherwise
                new.verdict, new.breaker_held, new.recheck_at = pb.SUSPECT, False, 0.0
                new.expected = f"put back by hand (--force) over a failed {old.check}; before: {old.expected}"
        return self._put(worker_id, old, new)

    def due(self, now: float | None = None) -> list[str]:
        """Workers whose recheck is due (failed or released by hand), oldest first."""
        now = self.clock() if now is None else now
        waiting = [(h.recheck_at, w) for w, h in self._by_worker.items() if 0 < h.recheck_at <= now and not h.cordoned]
        return [w for _, w in sorted(waiting)]

    def approve_return(self, worker_id: str) -> list[Change]:
        """A person lets a repeat offender back, once it passed: FailedPrecondition if it needs no
        approval or its latest verdict is not a pass. Its quarantines stay counted."""
        old = self.get(worker_id)
        if not old.validate_needs_approval:
            raise FailedPrecondition(f"worker {worker_id} needs no approval to return")
        if old.verdict != pb.HEALTHY:
            raise FailedPrecondition(
                f"worker {worker_id} has not passed since its last quarantine (latest: {old.check} "
                f"{pb.Verdict.Name(old.verdict)}): run `ringleader validate --workers {worker_id}` first")
        new = _copy(old)
        new.validate_needs_approval = False
        return self._put(worker_id, old, new, approved=True)

    def _repeats(self, old: pb.WorkerHealth, new: pb.WorkerHealth, approved: bool) -> None:
        """Carry the worker's recent automatic quarantines into `new`, count one that begins now,
        and keep it out from the REPEAT_LIMIT-th on (until approved)."""
        now = self.clock()
        recent = [t for t in old.validate_quarantined_at if t > now - REPEAT_WINDOW_S]
        new.validate_needs_approval = old.validate_needs_approval and not approved
        failed = new.verdict == pb.UNHEALTHY and not new.breaker_held
        if failed and not (old.verdict == pb.UNHEALTHY and not old.breaker_held):
            recent.append(now)
            new.validate_needs_approval = new.validate_needs_approval or len(recent) >= REPEAT_LIMIT
        del new.validate_quarantined_at[:]
        new.validate_quarantined_at.extend(recent)

    def _put(self, worker_id: str, old: pb.WorkerHealth, new: pb.WorkerHealth, approved: bool = False) -> list[Change]:
        self._repeats(old, new, approved)
        self._by_worker[worker_id] = new
        self.store.set_worker_health(worker_id, new)
        self.changed(worker_id)
        return [(worker_id, self._held(new))] if self._held(new) != self._held(old) else []


def _standing(old: pb.WorkerHealth, new: pb.WorkerHealth) -> str:
    """What `old` found that `new` (a worse verdict of another check) does not make void: a
    gpu_check's slow figure must not hide that telemetry saw a foreign process on the GPU."""
    if old.check == new.check:  # a recheck: what the other check found stands while this one fails
        return old.also if new.verdict != pb.HEALTHY else ""
    if old.verdict in (pb.VERDICT_UNSPECIFIED, pb.HEALTHY) or old.check == "cordon":
        return new.also
    found = f"{old.check} {pb.Verdict.Name(old.verdict)}: {old.figure}"
    return "; ".join(x for x in (found, old.also) if x)[:ALSO_MAX]


def _copy(h: pb.WorkerHealth) -> pb.WorkerHealth:
    out = pb.WorkerHealth()
    out.CopyFrom(h)
    return out
