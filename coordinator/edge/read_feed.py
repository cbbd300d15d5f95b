"""The core's side of the edge's read view (coordinator/edge/read_view.py): what changed, handed
over in one hop per turn of the core that changed something, and a stamp on a clock (STAMP_S).

It only reads the core: the jobs the turn's events named (an event listener; a job is copied
once a turn however many events it had) and the workers those jobs name; at every flush the
workers the registry marked touched (registered, left, forgotten, a state changed, its executor's
health, a new health record); and, as a net under the rest, a scan that looks at every worker
once a cycle (SCAN_S, longer on a fleet larger than SCAN_RATE a second), a share at each STAMP_S,
for a listing whose cheap signature (state, job, warm group, executor, health record by identity,
configuration drift) changed with no event of its own. Heartbeat times are not handed over: the
view reads them off the worker's connection when it answers. Every REASON_S the queued jobs whose
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
# ... and at most this many a second: at 50,000 workers the scan's 50,000 signatures a second (and
# the 10,000 listings a second it sent again for their heartbeat times) were a quarter of the
# core's time under the GIL, and a read that found the cycle behind looked at all 50,000 at once
# (0.5-0.9 s on 2 loaded cores, every 2 s). The touched workers go at once whatever the scan.
SCAN_RATE = 10_000
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
        self._ticked = 0.0  # when the clock last flushed (perf_counter)
        self._reasons: dict[str, str] = {}  # per queued job: the waiting reason the view was sent
        self._reasons_at = 0.0
        self._clock: asyncio.Task | None = None
        self._stopped = False

    def start(self) -> None:
        """On the core loop: listen, hand over every live job and worker now, then keep it current."""
        for job in [*self.c.queued_jobs(), *(rj.job for rj in self.c.book.running.values())]:
            self._changed[job.id] = job
        self.c.add_listener(self._heard)
        self.c.workers.follow()
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
        self._ticked = time.perf_counter()
        while True:
            await asyncio.sleep(STAMP_S)
            self.flush(share=self._share())

    def _share(self) -> float:
        """The scan's share for this tick: the time since the last one over the cycle's length,
        so a cycle keeps its length while the core's turns run late, at most four ticks' worth."""
        now = time.perf_counter()
        elapsed, self._ticked = min(now - self._ticked, 4 * STAMP_S), now
        return max(elapsed, 1e-3) / max(SCAN_S, self.c.workers.n_listed() / SCAN_RATE)

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
        self._touched(update)
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
        signature changed go to the view. A cycle starts from the registry's workers of its start:
        those gone since the last one leave the view."""
        if share >= 1 or self._at >= len(self._ring):
            self._ring, self._at = self.c.workers.all(), 0
            for wid in self._signs.keys() - self.c.workers.ids():
                del self._signs[wid]
                update.gone.append(wid)
        n = len(self._ring)
        take = n if share >= 1 else max(1, math.ceil(n * share))
        for i in range(self._at, min(n, self._at + take)):
            conn = self._ring[i]
            if self.c.workers.get(conn.worker_id) is conn:  # else gone or back on a new stream: the next cycle has it
                self._send(conn, update)
        self._at += take

    def _touched(self, update: ViewUpdate) -> None:
        """The workers the registry marked since the last flush: sent now (the current connection
        of each; one forgotten leaves the view)."""
        for wid in self.c.workers.take_touched():
            conn = self.c.workers.get(wid)
            if conn is not None:
                self._send(conn, update)
            elif self._signs.pop(wid, None) is not None:
                update.gone.append(wid)

    def _send(self, conn: WorkerConn, update: ViewUpdate) -> None:
        """`conn`'s listing to the view, if its signature changed since it was last sent."""
        if self._signs.get(wid := conn.worker_id) != (sign := self._sign(conn)):
            self._signs[wid] = sign
            update.workers.append(ViewWorker(conn.sort_key, self._info(conn), conn))

    def _members(self, jobs, update: ViewUpdate) -> None:
        for worker_id in {ref.worker_id for job in jobs for ref in job.workers}:
            if (conn := self.c.workers.get(worker_id)) is not None:
                self._send(conn, update)

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
    share an ask that has not started on the core yet (a held-up core gets one, however many reads
    wait); one that has started may have flushed before the change a new read follows, so that
    read asks again. Each waits at most `wait_s` from when the ask was sent: while the core is
    held up, reads after the first answer at once. An ask left behind still lands."""

    def __init__(self, feed: ReadFeed, core: asyncio.AbstractEventLoop, wait_s: float = FRESH_WAIT_S) -> None:
        self.feed, self.core, self.wait_s = feed, core, wait_s
        self._waiting: tuple[asyncio.Future, list[bool], float] | None = None  # (ask, [started], when)
        self.asked = 0  # asks sent to the core (a test's and the bench's count)

    async def __call__(self) -> None:
        now = time.monotonic()
        found = self._waiting
        if found is None or found[1][0]:
            started = [False]

            async def flush() -> None:  # on the core
                started[0] = True  # read on the edge: a benign cross-thread flag
                # Workers too: the touched ones go with every flush, the rest within the scan's cycle.
                self.feed.flush()
            ask = on(self.core, flush())
            ask.add_done_callback(lambda f: f.cancelled() or f.exception())  # a stopping core: nobody waits
            found = self._waiting = (ask, started, now)
            self.asked += 1
        # An ask the core has left waiting longer than that: it is held up; answer as the view is.
        left = self.wait_s - (now - found[2])
        if left > 0:
            await asyncio.wait([found[0]], timeout=left)
