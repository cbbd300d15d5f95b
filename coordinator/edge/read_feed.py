"""The core's side of the edge's read view (coordinator/edge/read_view.py): what changed, handed
over in one hop per turn of the core that changed something, and a stamp on a clock (STAMP_S).

It only reads the core: the jobs the turn's events named (an event listener; a job is copied
once a turn however many events it had) and the workers those jobs name; every SCAN_S (or when a
read asks: Freshen) the workers whose listing changed, told by a cheap signature per worker
(state, job, warm group, executor, health record by identity), and each worker's full listing
again every ROLL_S (its heartbeat time), a share a scan; every REASON_S the queued jobs whose
waiting reason changed. A write answered through the edge calls `flush` before its answer leaves
(read-your-writes). `cost` keeps the core's time spent here (the bench prints it)."""

from __future__ import annotations

import asyncio
import math
import time

from coordinator.shell.facade import Coordinator
from coordinator.core.registry import WorkerConn
from coordinator.edge.hop import on
from coordinator.edge.read_view import FRESH_WAIT_S, ReadView, ViewUpdate, ViewWorker
from ringleader import states
from ringleader.v1 import jobs_pb2 as pb

STAMP_S = 0.05  # the view's age when the core is idle stays under this (plus a turn)
# Every worker's listing looked at again in this long, a slice each STAMP_S (one look at every
# worker each 50 ms was 200,000 signatures a second at 10,000 workers, a third of the core's time,
# and one look at all of them at once holds the core 20-40 ms at 10,000); the members of a job
# that starts or ends are sent with its events, a write on workers looks at all at once.
SCAN_S = 1.0
ROLL_S = 5.0  # every worker's listing (its heartbeat time) sent again at least this often
REASON_S = 0.25  # queued jobs' waiting reasons looked at again at most this often


class FeedCost:
    """The core's time in the feed: turns flushed, jobs and workers copied, seconds spent."""

    def __init__(self) -> None:
        self.flushes = self.jobs = self.workers = 0
        self.seconds = 0.0
        self.max_s = 0.0

    def add(self, began: float, jobs: int, workers: int) -> None:
        spent = time.perf_counter() - began
        self.flushes += 1
        self.jobs += jobs
        self.workers += workers
        self.seconds += spent
        self.max_s = max(self.max_s, spent)


class ReadFeed:
    def __init__(self, coordinator: Coordinator, view: ReadView, edge: asyncio.AbstractEventLoop) -> None:
        self.c, self.view, self.edge = coordinator, view, edge
        self.cost = FeedCost()
        self._changed: dict[str, pb.Job] = {}  # jobs the events of this turn named
        self._due = False  # a flush is queued for the end of this turn
        self._signs: dict[str, tuple] = {}  # per worker id: what its listing was made from
        self._ring: list[WorkerConn] = []  # the workers of this cycle of the scan, in turn
        self._at = 0  # the next of them to look at
        self._cycles = 0
        self._cycle_at = 0.0  # when the cycle began (perf_counter)
        self._cycle_version = -1  # the registry's version then
        self._done_version, self._done_at = -1, 0.0  # of the last cycle that looked at every worker
        self._reasons: dict[str, str] = {}  # per queued job: the waiting reason the view was sent
        self._reasons_at = 0.0
        self._clock: asyncio.Task | None = None
        self._stopped = False

    def start(self) -> None:
        """On the core loop: listen, hand over every live job and worker now, then keep it current."""
        for job in [*self.c.queued_jobs(), *(rj.job for rj in self.c.book.running.values())]:
            self._changed[job.id] = job
        self.c.add_listener(self._heard)
        self.flush(workers=True)
        self._clock = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> None:
        self._stopped = True  # the edge loop closes next: nothing more is handed over
        if self._clock:
            self._clock.cancel()
            await asyncio.gather(self._clock, return_exceptions=True)

    def _heard(self, event: pb.JobEvent, job: pb.Job) -> None:  # a listener: on the core, must not block
        self._changed[job.id] = job
        if not self._due and not self._stopped:
            self._due = True
            asyncio.get_running_loop().call_soon(self.flush)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(STAMP_S)
            self.flush(share=STAMP_S / SCAN_S)

    def scan_behind(self) -> bool:
        """Whether a read of workers should have all of them looked at now: a worker registered, left
        or was forgotten since the last cycle that looked at every worker began, or that cycle is
        older than two cycles (the core was held up)."""
        return self.c.workers.version != self._done_version or time.perf_counter() - self._done_at > 2 * SCAN_S

    def flush(self, workers: bool = False, share: float = 0.0) -> None:
        """Hand the edge what changed since the last flush (`workers`: every worker's listing
        looked at now; `share`: that share of them, the next in turn), stamped now. On the core loop."""
        if self._stopped:
            return
        began = time.perf_counter()
        self._due = False
        self._stale_reasons(began)
        changed, self._changed = self._changed, {}
        update = ViewUpdate(stamp=time.monotonic(), jobs=[self._copy(job) for job in changed.values()])
        self._members(changed.values(), update)  # started, ended: their states changed with them
        if workers or share:
            self._workers(update, 1.0 if workers else share, began)
        self.edge.call_soon_threadsafe(self.view.apply, update)
        self.cost.add(began, len(update.jobs), len(update.workers))

    def _stale_reasons(self, now: float) -> None:
        """Queue the queued jobs whose waiting reason changed with no event of their own (a worker
        came, went or was cordoned: the reason counts the fleet), looked at every REASON_S."""
        if now - self._reasons_at < REASON_S:
            return
        self._reasons_at = now
        control, queued = self.c.control, self.c.book.queued
        live = dict(control.scheduler.reasons())
        live.update((job_id, held.reason()) for job_id, held in control.certifying.items())
        for job_id, reason in live.items():
            if self._reasons.get(job_id) != reason and job_id not in self._changed and job_id in queued:
                self._changed[job_id] = queued[job_id].job
        for job_id in [j for j in self._reasons if j not in live]:
            del self._reasons[job_id]  # started, ended or cancelled: its events sent it

    def _copy(self, job: pb.Job) -> tuple[pb.Job, bool]:
        book = self.c.book
        if job.id in book.queued or job.id in book.running:
            out = self.c.control.copy_of(job)  # with its waiting reason and progress
            if job.id in book.queued:
                self._reasons[job.id] = out.reason
            rj = book.running.get(job.id)
            has_rows = bool(rj is not None and rj.rows)
        else:
            (out := pb.Job()).CopyFrom(job)
            has_rows = states.is_terminal(job.state)  # its rows, if any, are the store's to read
        out.ClearField("results")
        return out, has_rows

    def _workers(self, update: ViewUpdate, share: float, now: float) -> None:
        """Look at `share` of the workers, the next in turn (1: every one now): those whose
        signature changed go to the view, and each cycle's ROLL_S / SCAN_S-th part of them again
        (their heartbeat time). A cycle starts from the registry's workers of its start: those
        gone since the last one leave the view."""
        if share >= 1 or self._at >= len(self._ring):
            self._ring, self._at, self._cycle_at = self.c.workers.all(), 0, now
            self._cycle_version = self.c.workers.version
            self._cycles += 1
            for wid in self._signs.keys() - self.c.workers.ids():
                del self._signs[wid]
                update.gone.append(wid)
        n = len(self._ring)
        take = n if share >= 1 else max(1, math.ceil(n * share))
        every = max(1, round(ROLL_S / SCAN_S))
        for i in range(self._at, min(n, self._at + take)):
            conn = self._ring[i]
            wid = conn.worker_id
            if self.c.workers.get(wid) is not conn:
                continue  # gone or back on a new stream since the cycle began: the next cycle has it
            sign = self._sign(conn)
            if self._signs.get(wid) != sign or (i + self._cycles) % every == 0:
                self._signs[wid] = sign
                update.workers.append(ViewWorker(conn.sort_key, self._info(conn)))
        self._at += take
        if self._at >= n:
            self._done_version, self._done_at = self._cycle_version, self._cycle_at

    def _members(self, jobs, update: ViewUpdate) -> None:
        for worker_id in {ref.worker_id for job in jobs for ref in job.workers}:
            conn = self.c.workers.get(worker_id)
            if conn is not None and self._signs.get(worker_id) != (sign := self._sign(conn)):
                self._signs[worker_id] = sign
                update.workers.append(ViewWorker(conn.sort_key, self._info(conn)))

    def _sign(self, conn: WorkerConn) -> tuple:
        # Its configuration drift counts the others ("3 others: unset"): another worker joining
        # changes it (worked out once per change of the fleet's configurations: fingerprints.py).
        return (id(conn), conn.state, conn.job_id, conn.holds, conn.executor_restarts, conn.executor_health,
                id(self.c.control.health.peek(conn.worker_id)), conn.connected_at,
                self.c.workers.configs.drift(conn.worker_id))

    def _info(self, conn: WorkerConn) -> pb.WorkerInfo:
        """The worker as the core's ListWorkers shows it (coordinator/shell/facade.py)."""
        info = conn.info()
        info.state = self.c.listed_state(conn)
        info.health.CopyFrom(self.c.control.health.shown(conn.worker_id))
        return info


class Freshen:
    """On the edge: a read's ask that the core hand over what it has (ReadView's `fresh`). Reads
    share an ask that has not started on the core yet (a held-up core gets one per kind, however
    many reads wait); one that has started may have flushed before the change a new read follows,
    so that read asks again. Each waits at most `wait_s` from when the ask was sent: while the core
is held up, reads after the first answer at once. An ask left behind still lands."""

    def __init__(self, feed: ReadFeed, core: asyncio.AbstractEventLoop, wait_s: float = FRESH_WAIT_S) -> None:
        self.feed, self.core, self.wait_s = feed, core, wait_s
        self._waiting: dict[bool, tuple[asyncio.Future, list[bool], float]] = {}  # per kind: (ask, [started], when)
        self.asked = 0  # asks sent to the core (a test's and the bench's count)

    async def __call__(self, workers: bool) -> None:
        now = time.monotonic()
        found = self._waiting.get(workers)
        if found is None or found[1][0]:
            started = [False]

            async def flush() -> None:  # on the core
                started[0] = True  # read on the edge: a benign cross-thread flag
                # Workers: the scan's slices keep them within SCAN_S while the core turns; all of
                # them at once only when it fell behind (a look at 50,000 holds the core 0.1 s).
                self.feed.flush(workers=workers and self.feed.scan_behind())
            ask = on(self.core, flush())
            ask.add_done_callback(lambda f: f.cancelled() or f.exception())  # a stopping core: nobody waits
            found = self._waiting[workers] = (ask, started, now)
            self.asked += 1
        # An ask the core has left waiting longer than that: it is held up; answer as the view is.
        left = self.wait_s - (now - found[2])
        if left > 0:
            await asyncio.wait([found[0]], timeout=left)
