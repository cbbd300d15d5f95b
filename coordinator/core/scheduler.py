"""Gang scheduling: which queued jobs start now, on which workers, in which rank order.

Pure (no I/O, no clock), so it is tested without servers. Rules:
- a job is placed whole (world_size idle eligible workers of one backend) or not at all;
- a gang never mixes the settings and versions NCCL needs equal (coordinator/health/fingerprints.py):
  the unit it is drawn from is a lane, a backend and a configuration key, so a worker configured
  unlike its peers is placed only with workers like it, or the job waits naming it;
- queue order is priority, raised by one level per AGING_S waited, then submission order;
- a job that cannot start now but could on the connected fleet (world_size eligible workers of
  one backend are connected) reserves the eligible idle workers of such backends, so later
  (smaller) jobs cannot starve it; a job the connected fleet cannot run (too few workers, or
  enough only across backends, which a gang never mixes) reserves nothing and blocks nobody;
- a gang equal to a warm group (every member's executor holds the same initialised process
  group, coordinator/core/groups.py) is preferred and keeps that group's rank order, so the job
  starts without a new NCCL init;
- ranks on one host are adjacent (by host, then device index), on the hosts with most idle workers;
  workers whose latest verdict is HEALTHY are preferred over suspect or never-checked ones.

`Scheduler` is the incremental form the control core keeps; `plan` the one-shot form. A pass does
not rescan the queue or the fleet:
- aging raises every waiting job by the same amount per second, so the order of waiting jobs
  never changes: it is the static key submitted_at - AGING_S * priority (`PendingJob.order`);
- jobs are grouped by what they need of their workers (`Need`); within a group they are
  interchangeable, so when a group's first job cannot start, none behind it can (it reserved
  every idle worker they could use): a pass visits a group once per job placed, plus once;
- workers are indexed by kind (backend, device type, device name, memory) and host, so
  eligibility is decided once per kind, not per worker;
- a pass walks only the needs that fit a kind of worker with idle workers left unclaimed
  (coordinator/core/sched_index.py's KindQueues), and ends when none is left.
Its cost grows with the needs it visits, not with the queue's length or the hosts (a pass counts
each kind's idle workers per host once: coordinator/core/claims.py; bench/scheduler_pass.py).
A pass may stop at a number of ranks, the rest left to the next. Waiting reasons are derived
when asked (`reason`).
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Mapping

from coordinator.core import waiting
from coordinator.core.sched_index import Claims, FleetIndex, HostPool, KindQueues, Lane, QueueGroup, WorkerView
from coordinator.core.sched_types import AGING_S, Decision, Need, PendingJob, Plan
from ringleader import spec as specs

__all__ = ["AGING_S", "Decision", "Need", "PendingJob", "Plan", "Scheduler", "WorkerView", "by_size", "plan"]

WarmGroups = Mapping[int, Mapping[str, tuple[str, ...]]]  # size -> key -> members in rank order


class Scheduler:
    """The queue and the connected fleet, indexed; `place` decides, `reason` explains."""

    def __init__(self, cordoned_ids: Callable[[], Iterable[str]] = list) -> None:
        self._jobs: dict[str, PendingJob] = {}
        self._groups: dict[Need, QueueGroup] = {}
        self._fleet = FleetIndex()
        self._pass, self.cut = 0, False  # cut: the last pass stopped at its ranks (place's `ranks`)
        self._queues = KindQueues()  # a pass visits only the needs that fit a kind with idle workers
        self._queues_epoch = -1
        self._cordoned_ids = cordoned_ids  # the health book's: waiting reasons count them apart

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, job: PendingJob) -> None:
        self.remove(job.job_id)
        self._jobs[job.job_id] = job
        need = job.need
        group = self._groups.get(need) or self._groups.setdefault(need, QueueGroup(need))
        first = not group.live or job.order < group.live[group.head()]
        group.push(job.job_id, job.order)
        if first:
            self._queues.push(need, job.order)

    def remove(self, job_id: str) -> None:
        job = self._jobs.pop(job_id, None)
        if job is None:
            return
        group = self._groups[job.need]
        first = group.head() == job_id
        group.discard(job_id)
        if not group.live:
            del self._groups[job.need]
        elif first:
            self._queues.push(job.need, group.live[group.head()])

    def put_worker(self, w: WorkerView) -> None:
        """A connected worker, new or changed (idle or busy)."""
        self._fleet.put(w)

    def drop_worker(self, worker_id: str) -> None:
        """A worker that is no longer connected."""
        self._fleet.drop(worker_id)

    def place(self, warm: WarmGroups | None = None, ranks: int = 0) -> list[Decision]:
        """Decide which queued jobs start now (they leave the queue); `warm` holds the warm
        groups a job may reuse, by size. `ranks` (0: no bound): stop once that many are placed;
        `cut` says whether this pass did."""
        self._pass, self.cut = self._pass + 1, False
        claims = Claims(self._fleet.n_idle)
        if not claims.free:
            return []
        self._sync_queues()
        fleet = self._fleet
        walk = self._queues.walk(lambda: [k for k, n in fleet.idle_n.items() if n > claims.of_kind.get(k, 0)],
                                 self._head)
        decisions: list[Decision] = []
        placed = 0
        # A waiting job's reservation is claimed once the walk reaches a later need (a fleet-wide
        # check waits last: claiming its idle workers every pass kept nobody off them). A need
        # offered meanwhile whose kinds the claim exhausts finds no idle worker: as if not walked.
        held: tuple[Need, dict[str, HostPool]] | None = None
        held_listed: list[WorkerView] = []
        for need in walk:
            if held is not None:
                self._reserve(*held, claims)
                held = None
            if held_listed:
                claims.take_all(held_listed)
                held_listed = []
            group = self._groups[need]
            job = self._jobs[group.head()]
            lanes = self._runnable_on(group)
            if not lanes:
                continue  # the connected fleet cannot run it: it claims nothing
            if need.worker_ids:
                # A job naming fewer idle workers than it needs cannot start: it holds those it
                # names, as below, without counting them per host (a fleet-wide check's gangs
                # wait this way by the hundred).
                listed = [self._fleet.listed_idle(need, b, claims) for b in lanes]
                if all(len(ws) < job.world_size for ws in listed):
                    group.seen_pass, group.blocked = self._pass, job.job_id
                    group.seen_idle = sum(map(len, listed))
                    held_listed = [w for ws in listed for w in ws]
                    continue
            pools = {b: self._fleet.idle_hosts(need, b, claims) for b in lanes}
            decision = self._pick(job, pools, claims, warm or {})
            if decision is None:
                # Feasible later: hold what it can use now, so smaller jobs cannot starve it.
                group.seen_pass, group.blocked = self._pass, job.job_id
                group.seen_idle = sum(n for hosts in pools.values() for n in hosts.values())
                held = (need, pools)
                continue
            decisions.append(decision)
            for wid in decision.worker_ids:
                claims.take(fleet.views[wid])
            self.remove(job.job_id)  # its need's next job, if any, joins the walk
            placed += len(decision.worker_ids)
            if ranks and placed >= ranks:
                self.cut = True  # the rest in the next pass
                break
        walk.close()
        return decisions

    def pending(self, job_id: str) -> PendingJob | None:
        return self._jobs.get(job_id)

    def runnable(self, job_id: str) -> bool:
        """Whether the connected fleet could run the queued job (enough eligible workers connected)."""
        job = self._jobs.get(job_id)
        return job is not None and bool(self._runnable_on(self._groups[job.need]))

    def reason(self, job_id: str) -> str:  # why a queued job waits, as of the last pass ("": not queued)
        job = self._jobs.get(job_id)
        if job is None:
            return ""
        group = self._groups[job.need]
        seen = (group.seen_pass, group.blocked) == (self._pass, job_id)
        idle = group.seen_idle if seen else None if self.cut else 0  # None: a cut pass did not reach it
        return waiting.reason(self._fleet, group.need, self._connected(group), idle, self._cordoned_ids)

    def reasons(self) -> Iterator[tuple[str, str]]:
        """(job id, `reason`) for every queued job; a group's jobs behind its blocked one share one
        reason, worked out once (the edge's read view re-sends the ones that changed)."""
        for group in self._groups.values():
            behind = None
            for job_id in group.live:
                if job_id == group.blocked:
                    yield job_id, self.reason(job_id)
                else:
                    behind = self.reason(job_id) if behind is None else behind
                    yield job_id, behind

    def _head(self, need: Need) -> tuple | None:
        group = self._groups.get(need)
        return group.live[group.head()] if group else None

    def _sync_queues(self) -> None:
        """Start the kind queues again when a kind of worker came or went, or when entries left
        behind by started and cancelled jobs outnumber the live ones."""
        kinds = self._fleet.totals
        if self._queues_epoch != self._fleet.kinds_epoch or \
                self._queues.size() > 2 * len(self._groups) * max(1, len(kinds)) + 256:
            self._queues.rebuild(kinds, {need: self._head(need) for need in self._groups})
            self._queues_epoch = self._fleet.kinds_epoch

    def _connected(self, group: QueueGroup) -> dict[Lane, int]:
        """Eligible connected workers per lane, counted again only when the fleet changed."""
        if group.epoch != self._fleet.epoch:
            backends = tuple(b for b in specs.BACKENDS if b in group.need.backends)
            group.connected, group.epoch = self._fleet.connected(group.need, backends), self._fleet.epoch
        return group.connected

    def _runnable_on(self, group: QueueGroup) -> tuple[Lane, ...]:
        """The lanes with enough eligible connected workers for the whole gang."""
        return tuple(b for b, k in self._connected(group).items() if k >= group.need.world_size)

    def _pick(self, job: PendingJob, pools: dict[Lane, HostPool], claims: Claims,
              warm: WarmGroups) -> Decision | None:
        """A gang for `job` from the idle workers per lane and host in `pools`, or None."""
        need, n, views = job.need, job.world_size, self._fleet.views
        able = [b for b, hosts in pools.items() if hosts.total >= n]
        if not able:
            return None
        # Prefer a warm group of exactly the right size: no new process-group init.
        for key, members in warm.get(n, {}).items():
            ws = [views.get(m) for m in members]
            if all(w is not None and w.idle and w.worker_id not in claims.ids and need.admits(w) for w in ws) \
                    and len({w.lane for w in ws}) == 1 and ws[0].lane in able:
                return Decision(job.job_id, tuple(members), ws[0].backend, key)
        # Pack onto the hosts with the most idle workers, so ranks share hosts where they can.
        backend, hosts = able[0], pools[able[0]]
        chosen: list[WorkerView] = []
        for host in hosts.fullest(n):
            chosen += self._fleet.idle_on(need, backend, host, claims)[: n - len(chosen)]
        return Decision(job.job_id, _rank_order(chosen), backend[0], "")

    def _reserve(self, need: Need, pools: dict[Lane, HostPool], claims: Claims) -> None:
        for w in [w for b, hosts in pools.items() for w in self._fleet.idle_in(need, b, hosts, claims)]:
            claims.take(w)


def _rank_order(workers: list[WorkerView]) -> tuple[str, ...]:
    return tuple(w.worker_id for w in sorted(workers, key=lambda w: (w.host, w.device_index, w.worker_id)))


def by_size(groups: Mapping[str, tuple[str, ...]]) -> dict[int, dict[str, tuple[str, ...]]]:
    """Warm groups (key -> members) indexed by size, as `Scheduler.place` takes them."""
    out: dict[int, dict[str, tuple[str, ...]]] = {}
    for key, members in groups.items():
        out.setdefault(len(members), {})[key] = members
    return out


def plan(queue: Iterable[PendingJob], fleet: Iterable[WorkerView],
         groups: Mapping[str, tuple[str, ...]] | None = None) -> Plan:
    """One pass over `queue` on `fleet` (every connected worker, idle or busy); `groups` the warm
    groups a job may reuse (key -> members in rank order)."""
    s = Scheduler()
    for w in fleet:
        s.put_worker(w)
    queue = list(queue)
    for job in queue:
        s.add(job)
    decisions = s.place(by_size(groups or {}))
    return Plan(decisions, {j.job_id: s.reason(j.job_id) for j in queue if j.job_id in s})
