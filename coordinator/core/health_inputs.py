"""Fleet health inside the control core: the part of `Control` (coordinator/core/control.py) that
applies check verdicts and cordons to the health book (coordinator/health/book.py) it holds, and
certifies a preflight job's gang before it starts (coordinator/core/preflight.py).

A check job's verdicts are applied in the input that ends the job (`_verdicts`, from `end`), so
the placement pass at the end of that input already sees the quarantine; a cordon is an input
(`Cordon`). A quarantine change re-indexes the worker for the scheduler (its view reads the
book) and is listed in `Out.health`, for observers told after the input.
"""

from __future__ import annotations

import logging

from coordinator.core import preflight
from coordinator.core.inputs import Cordon
from coordinator.core.jobs import Running
from coordinator.core.scheduler import Decision
from coordinator.health import recheck, telemetry_rules, verdicts
from coordinator.health.sweeper import short
from coordinator.health.book import Change, HealthBook
from coordinator.health.expectations import History
from coordinator.core.registry import WorkerConn
from ringleader.errors import NotFound
from ringleader import checks, jobspec
from ringleader.jobspec import check_text
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

log = logging.getLogger("ringleader.coordinator")


class HealthInputs:
    """Verdicts, cordons and preflight for `core`, the Control (control.py) that holds it: it
    changes the health book, and asks the core to re-index a worker, start or queue a job."""

    def __init__(self, core, health: HealthBook, expectations: History) -> None:
        self.core, self.health, self.expectations = core, health, expectations
        self.certifying: dict[str, preflight.Certifying] = {}  # preflight jobs whose gang is being checked
        self.preflight_of: dict[str, str] = {}  # running preflight check id -> the job it certifies

    def cordon(self, inp: Cordon) -> None:
        check_text("worker_id", inp.worker_id)
        if self.core.workers.get(inp.worker_id) is None and inp.worker_id not in self.health.known():
            raise NotFound(f"worker {inp.worker_id} not found")
        if inp.approve_return:
            self._health_changed(self.health.approve_return(inp.worker_id))
            return
        self._health_changed(self.health.cordon(inp.worker_id, inp.on, inp.force))
        if not inp.on and inp.force:
            log.warning("worker %s put back in service by hand (--force), over its verdict", inp.worker_id)

    def verdicts(self, rj: Running) -> None:
        """Apply what a finished check found, before this input's placement pass."""
        model_of = {c.worker_id: c.reg.device.name for c in self.core.workers.connected()}
        expect = verdicts.Expect(model_of, self.expectations)
        found = verdicts.of_job(rj.job, expect)
        if not found:
            return
        found = recheck.hold_unfounded_releases(rj.job, found, self.health.get)
        self.health.keep_job_verdicts(rj.id, found)
        self.record(found, model_of)
        held = [w for w in sorted(found) if self.health.get(w).breaker_held]
        if held:
            alert = (f"circuit breaker: {', '.join(held)} failed {rj.job.spec.WhichOneof('kind')} but automatic "
                     f"quarantine already holds {self.health.max_share:.0%} of their GPU model's workers; "
                     f"left in service for an operator to decide (`ringleader workers cordon ID`)")
            log.error("%s", alert)
            self.core._out.alerts.append(alert)
        for scope, text in expect.findings:  # shown even when the breaker holds the quarantines
            self.expectations.findings[scope] += 1
            log.error("check %s: %s", rj.id, text)
            self.core._out.alerts.append(f"check {rj.id}: {text}")

    def telemetry(self, conn: WorkerConn, readings: wpb.GpuTelemetry) -> None:
        """A heartbeat's GPU telemetry, judged by the rule table (coordinator/health/telemetry_rules.py)
        in the same input: a verdict is recorded when the rules that fire change (not on every
        heartbeat), so an idle GPU that develops a fault is suspect at once."""
        worker_id = conn.worker_id
        found = telemetry_rules.verdicts(worker_id, self._cotenants_excused(conn, readings))
        fired = tuple((f.rule, f.verdict) for f in found)
        before = self.health.telemetry_fired.get(worker_id)
        self.health.telemetry_fired[worker_id] = fired
        if fired == before or (before is None and not fired and self.health.get(worker_id).check != "telemetry"):
            return
        self.record({worker_id: telemetry_rules.health(found, self.health.clock())})

    def _cotenants_excused(self, conn: WorkerConn, readings: wpb.GpuTelemetry) -> wpb.GpuTelemetry:
        """`readings` without the foreign processes that a worker sharing the GPU by registration
        (same host and CUDA device: the shared-GPU fleet) lists as its own: that worker's executor,
        not a stranger. The other worker's word can only excuse a process here, never accuse
        `conn`; a process nobody sharing the GPU claims stays foreign."""
        if not readings.foreign:
            return readings
        theirs = {pid for other in self.core.workers.sharing(conn) for pid in other.gpu_pids}
        if not any(p.pid in theirs for p in readings.foreign):
            return readings
        kept = wpb.GpuTelemetry()
        kept.CopyFrom(readings)
        del kept.foreign[:]
        kept.foreign.extend(p for p in readings.foreign if p.pid not in theirs)
        return kept

    def crashed(self, rj: Running, rank: int, failure: int, error: str) -> None:
        """A rank's own report of its failure ended the job: evidence on its worker (a SUSPECT or,
        for a repeat offender, UNHEALTHY verdict: coordinator/health/crashes.py), in this input."""
        worker_id = rj.members[rank]
        found = self.health.crashes.add(worker_id, failure, error, rj.id, rj.members, self.health.clock())
        if found is None:
            return
        log.warning("worker %s: %s", worker_id, found.figure)
        self.record({worker_id: found})

    def record(self, found: dict[str, pb.WorkerHealth], model_of: dict[str, str] | None = None) -> None:
        """Record verdicts in this input, whatever found them (a check, telemetry, a crash): the
        quarantines they change, the observers told of every changed verdict, observe mode's alerts,
        and the scheduler's preference (a verdict changes which workers it prefers)."""
        if model_of is None:
            model_of = {c.worker_id: c.reg.device.name for c in self.core.workers.connected()}
        before = {w: _verdict_of(self.health.get(w)) for w in found}
        self._health_changed(self.health.record(found, model_of))
        self._verdict_changed(before)
        self._observed(found)
        for worker_id in found:
            if (conn := self.core.workers.get(worker_id)) is not None and conn.connected:
                self.core._index(conn)

    def _observed(self, found: dict[str, pb.WorkerHealth]) -> None:
        """In observe mode nothing is quarantined: the operator hears of each failed verdict instead."""
        if not self.health.observe:
            return
        for w in sorted(w for w, h in found.items() if h.verdict == pb.UNHEALTHY):
            alert = f"observe mode: {w} failed {found[w].check} ({found[w].figure}); left in service"
            log.warning("%s", alert)
            self.core._out.alerts.append(alert)

    def _health_changed(self, changes: list[Change]) -> None:
        for worker_id, on in changes:
            log.warning("worker %s %s", worker_id, "quarantined" if on else "back in service")
            conn = self.core.workers.get(worker_id)
            if conn is not None and conn.connected:
                self.core._index(conn)
                self.core._dirty = True  # a worker left or rejoined the pool user jobs draw from
            self.core._out.health.append(worker_id)

    def _verdict_changed(self, before: dict[str, tuple]) -> None:
        """List in `Out.health` the workers whose verdict changed without a quarantine change (a
        first pass, a suspect, a failure the circuit breaker held), for observers such as the
        remediation hooks (coordinator/health/hooks.py)."""
        for worker_id, was in before.items():
            if _verdict_of(self.health.get(worker_id)) != was and worker_id not in self.core._out.health:
                self.core._out.health.append(worker_id)

    # ---- preflight: certify the gang the placement pass picked, then start the job ---------

    def preflight(self, d: Decision) -> bool:
        """Take over the start of a preflight job whose gang has an uncertified member: run the
        checks on the gang first (True). False: start it now."""
        spec = self.core.book.queued[d.job_id].valid.spec
        if not preflight.wants(spec) or not preflight.uncertified(self.health, d.worker_ids, self.core.clock.wall):
            self.certifying.pop(d.job_id, None)
            return False
        c = self.certifying.get(d.job_id) or preflight.Certifying(d.job_id, d.worker_ids, d.backend)
        c.members, c.backend, c.kinds = d.worker_ids, d.backend, list(checks.PREFLIGHT_KINDS)
        self.certifying[d.job_id] = c
        self._next_preflight_check(c)
        return True

    def _next_preflight_check(self, c: preflight.Certifying) -> None:
        kind = c.kinds.pop(0)
        check = self.core.book.submit(jobspec.normalize(preflight.check_spec(kind, c.members, c.job_id, short(kind))))
        c.check_id = check.id
        self.preflight_of[check.id] = c.job_id
        self.core._start(Decision(check.id, c.members, c.backend, self._warm_key(c.members)))  # the gang the pass reserved

    def _warm_key(self, members: tuple[str, ...]) -> str:
        """The warm group these members hold in this rank order, if any ("" for none): the next
        check of a gang, and the job after them, reuse the group the last check formed."""
        return next((key for key, m in self.core.groups.warm().get(len(members), {}).items() if m == members), "")

    def preflight_checked(self, check: Running) -> None:
        """A preflight check ended (its verdicts applied, its workers freed, in this input): run the
        next kind on the same gang, start the job, or put it back in the queue without a failed member."""
        job_id = self.preflight_of.pop(check.id, "")
        c = self.certifying.get(job_id)
        if c is None or c.check_id != check.id or job_id not in self.core.book.queued:
            return  # cancelled meanwhile
        q = self.core.book.queued[job_id]
        failed, fatal = preflight.failure(self.health, c.members, set(q.valid.spec.placement.worker_ids))
        ended = check.job.state == pb.SUCCEEDED
        # After the last kind, a member may still be uncertified without failing (a suspect verdict).
        doubtful = [] if c.kinds or not ended or failed or self.health.observe else \
            preflight.uncertified(self.health, c.members, self.core.clock.wall)
        c.unfinished += not ended or bool(doubtful)
        if fatal or c.unfinished >= preflight.MAX_UNFINISHED:
            del self.certifying[job_id]
            self.core.book.finish(job_id, pb.FAILED, fatal or f"preflight: its gang was not certified {c.unfinished} "
                                                         f"times; the last: check {check.id} {check.job.reason}"
                                                         + (f", {', '.join(doubtful)} suspect" if doubtful else ""))
            return
        usable = all((w := self.core.workers.get(m)) is not None and w.state == pb.IDLE for m in c.members)
        if ended and not failed and not doubtful and usable:
            if c.kinds:
                self._next_preflight_check(c)
            else:
                self.core._start(Decision(job_id, c.members, c.backend, self._warm_key(c.members)))  # certified: it starts
            return
        log.warning("job %s: preflight of %s: %s; placing it again", job_id, ", ".join(c.members),
                    f"{', '.join(failed or doubtful)} {'failed' if failed else 'suspect'}" if failed or doubtful
                    else f"check {check.id} {check.job.reason}")
        self.core._enqueue(q)  # the placement pass at the end of this input picks another gang


def _verdict_of(h: pb.WorkerHealth) -> tuple:
    return h.verdict, h.breaker_held
