"""The server side of the web UI's fleet health view: a compact snapshot of every worker, and the
changes since a version, so that an open tab costs as little at 5,000 workers as at 200.

One FleetFeed per coordinator (not per tab) reads the facade's worker list at most once a
second, and only while some tab asked within the last IDLE_S; it keeps each worker as a small
record, diffs the new list against the last one, and counts a version per change. A tab asks
`GET /api/v1/fleet?since=V&wait=S`: the records changed since V (all of them when V is 0 or too
old), at once when there are some, else when the next change comes or after S seconds (a long
poll: the change stream over plain fetch(), with the tab's token in its headers).

A worker's record (JSON keys kept short, since 5,000 of them make the first answer):
  id, host, dev (device name), type (cuda|cpu), idx (device index), st (WorkerState name),
  ex (ExecutorHealth name, absent when OK), job (its job id), stale (no heartbeat for STALE_S),
  and its verdict, when it has one: v (Verdict name), check, fig, exp, at, vjob (the check job),
  cord (cordoned by hand), re (next recheck, unix seconds); cfg: how its configuration is unlike its
  peers' (health/fingerprints.py). `observe` (the answer's): verdicts quarantine nothing.
The heartbeat time is left out on purpose: it changes every second for every worker.

Each record's JSON is kept beside it and encoded again only when the record changes, so a full
answer is those joined (kept per version): 2 ms of CPU at 5,000 workers, where encoding them all
took about 20 ms of the coordinator's loop per full answer, and several times that under load.
"""

from __future__ import annotations

import asyncio
import collections
import gzip
import json
import time
from typing import Annotated, Any, Callable

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from coordinator.shell.facade import Coordinator
from coordinator.core.registry import WorkerConn
from dashboard.api import JSON
from dashboard.schemas import json_safe
from dashboard.server import GZIP_LEVEL
from ringleader.defaults import PAGE_MAX
from ringleader.v1 import jobs_pb2 as pb

POLL_S = 1.0  # the worker list is read at most this often, whatever the number of tabs
IDLE_S = 60.0  # no tab asked for this long: stop reading it
STALE_S = 15.0  # a connected worker silent for this long is shown as stale
HISTORY = 600  # versions kept to answer `since` with changes only; older: a full snapshot
MAX_WAIT_S = 30.0
MAX_LINK_RANKS = 256  # a larger link matrix is shown host by host (slowest link of each pair)
FIRST = "/api/v1/fleet?since=0&wait=0"  # what the overview asks first (fleet.js), and preloads

Record = dict[str, Any]
OK_EXECUTOR = {pb.EXECUTOR_HEALTH_UNSPECIFIED, pb.EXECUTOR_OK}
# Enum names by number, looked up 5,000 times a second (a dict is several times faster than .Name()).
STATE = {v.number: v.name for v in pb.WorkerState.DESCRIPTOR.values}
EXECUTOR = {v.number: v.name for v in pb.ExecutorHealth.DESCRIPTOR.values}


def encode(value: Any) -> bytes:
    """JSON as dashboard.api.JSON renders it (what JSON cannot carry replaced)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    except ValueError:  # UnicodeEncodeError is one
        return json.dumps(json_safe(value), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def record(conn: WorkerConn, state: int, h: pb.WorkerHealth | None, now: float, drift: str = "") -> Record:
    """A worker's record from its connection, its state as listed and its health record (None:
    never checked). Read from the connection, not from a listing: building 5,000 WorkerInfo
    messages was two thirds of a read."""
    reg = conn.reg
    d = reg.device
    r: Record = {"id": reg.worker_id, "host": reg.host, "dev": d.name, "type": d.type, "idx": d.index,
                 "st": STATE.get(state, str(state))}
    if conn.executor_health not in OK_EXECUTOR:
        r["ex"] = EXECUTOR.get(conn.executor_health, str(conn.executor_health))
    if conn.job_id:
        r["job"] = conn.job_id
    beat = conn.last_heartbeat_wall
    if state != pb.DISCONNECTED and beat and now - beat > STALE_S:
        r["stale"] = True
    if h is not None and (h.verdict != pb.VERDICT_UNSPECIFIED or h.cordoned):
        r.update(v=pb.Verdict.Name(h.verdict), check=h.check, fig=h.figure, exp=h.expected, at=h.at,
                 vjob=h.job_id, cord=h.cordoned, re=h.recheck_at)
        if h.also:
            r["also"] = h.also
    return {**r, "cfg": drift} if drift else r


class FleetFeed:
    """Versioned worker records of one coordinator (see the module's docstring)."""

    def __init__(self, core: Coordinator, clock: Callable[[], float] = time.time, history: int = HISTORY) -> None:
        self.core = core
        self.clock = clock
        self.version = 0
        self.records: dict[str, Record] = {}
        self._encoded: dict[str, bytes] = {}  # each record's JSON, encoded when it changed
        self._inputs: dict[str, tuple[tuple, Record]] = {}  # what each record was made of, and it
        self._full: tuple[int, bytes] = (-1, b"")  # the full answer's JSON at a version
        self._gzipped: tuple[bytes, bytes] = (b"", b"")  # a full answer's JSON, and its gzip
        self.jobs = {"running": 0, "queued": 0}
        self.links_job = ""  # the latest finished link matrix job
        self._history: collections.deque[tuple[int, set[str]]] = collections.deque(maxlen=history)
        self._read_at = float("-inf")
        self._asked_at = float("-inf")
        self._changed = asyncio.Event()
        self._poller: asyncio.Task | None = None
        core.add_listener(self._on_job_event)

    # ---- reading the coordinator --------------------------------------------------------------

    def read(self) -> None:
        """Read the worker list and the job counts (at most once per POLL_S); a change makes a version."""
        now = self.clock()
        if now - self._read_at < POLL_S:
            return
        self._read_at = now
        fresh, changed = self._records(now)
        queued, running, _ = self.core.book.counts()
        jobs = {"running": running, "queued": queued}
        if not self.links_job and not self.version:
            self.links_job = self._latest_link_matrix()
        if changed or jobs != self.jobs or not self.version:
            self.records, self.jobs = fresh, jobs
            for i in changed:
                if i in fresh:
                    self._encoded[i] = encode(fresh[i])
                else:
                    self._encoded.pop(i, None)
            self._bump(changed)

    def _records(self, now: float) -> tuple[dict[str, Record], set[str]]:
        """Every worker's record, and the ids whose record changed or is gone. A record is built
        again only when what it is made of changed: its registration, listed state, executor
        health, job, staleness or health record (the health book replaces a record, never changes
        it in place). Building all 5,000 took 12 ms of CPU a read; on the coordinator's loop,
        beside the worker streams' thread, that became 100-500 ms of a first fleet request."""
        book, core, inputs = self.core.fleet.book, self.core, self._inputs
        fresh: dict[str, Record] = {}
        changed: set[str] = set()
        for c in core.workers.all():
            reg = c.reg
            wid, state, h, beat = reg.worker_id, core.listed_state(c), book.peek(reg.worker_id), c.last_heartbeat_wall
            drift = core.workers.configs.drift(wid)
            made_of = (reg, state, c.executor_health, c.job_id, state != pb.DISCONNECTED and bool(beat) and now - beat > STALE_S, h, drift)
            known = inputs.get(wid)
            if known is not None and known[0] == made_of:
                fresh[wid] = known[1]
                continue
            r = fresh[wid] = record(c, state, h, now, drift)
            inputs[wid] = (made_of, r)
            if self.records.get(wid) != r:
                changed.add(wid)
        gone = self.records.keys() - fresh.keys()
        for wid in gone:
            inputs.pop(wid, None)
        return fresh, changed | gone

    def _latest_link_matrix(self) -> str:
        page = self.core.list_jobs(states=[pb.SUCCEEDED], limit=PAGE_MAX)
        return next((j.id for j in page.jobs if j.spec.WhichOneof("kind") == "link_matrix"), "")

    def _on_job_event(self, event: pb.JobEvent, job: pb.Job) -> None:
        if (event.WhichOneof("event") == "state" and event.state.state == pb.SUCCEEDED
                and job.spec.WhichOneof("kind") == "link_matrix"):
            self.links_job = job.id
            self._bump(set())

    def _bump(self, changed: set[str]) -> None:
        self.version += 1
        self._history.append((self.version, changed))
        self._changed.set()
        self._changed = asyncio.Event()

    # ---- answering tabs -----------------------------------------------------------------------

    def since(self, version: int) -> dict:
        """What a tab at `version` lacks: the changed records and the ids gone, or everything."""
        head = {"version": self.version, "jobs": self.jobs, "links_job": self.links_job, "observe": self.core.fleet.book.observe}
        oldest = self._history[0][0] if self._history else self.version + 1
        if version <= 0 or version > self.version or version < oldest - 1:
            return {**head, "full": True, "workers": list(self.records.values())}
        ids: set[str] = set()
        for v, changed in self._history:
            if v > version:
                ids |= changed
        return {**head, "full": False, "workers": [self.records[i] for i in sorted(ids) if i in self.records],
                "removed": sorted(i for i in ids if i not in self.records)}

    def body(self, answer: dict) -> bytes:
        """`answer` (what `since` returned, with no change in between) as JSON; a full one joined
        from the records' kept JSON."""
        if not answer["full"] or answer["version"] != self.version:
            return encode(answer)
        if self._full[0] != self.version:
            head = encode({k: v for k, v in answer.items() if k != "workers"})
            workers = b",".join(self._encoded[i] for i in self.records)
            self._full = (self.version, head[:-1] + b',"workers":[' + workers + b"]}")
        return self._full[1]

    def gzipped(self, answer: dict) -> bytes | None:
        """A full answer's body gzipped, made once per version (None for changes only: small). Made
        here, on the loop: Starlette's middleware hands a body over 128 KiB to a thread to compress,
        and on a coordinator busy with 5,000 worker streams that thread waits for the GIL."""
        if not answer["full"] or answer["version"] != self.version:
            return None
        body = self.body(answer)
        if self._gzipped[0] is not body:
            # The server's level: 3 ms for 5,000 workers' full answer (506 KB -> 38 KB).
            self._gzipped = (body, gzip.compress(body, GZIP_LEVEL, mtime=0))
        return self._gzipped[1]

    async def next(self, version: int, wait_s: float) -> dict:
        """`since(version)`, once it has something new (or after `wait_s`)."""
        self._asked_at = self.clock()
        self._ensure_poller()
        self.read()
        if version == self.version and wait_s > 0:
            try:
                await asyncio.wait_for(self._changed.wait(), wait_s)
            except TimeoutError:
                pass
        return self.since(version)

    def _ensure_poller(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        """Read every POLL_S while some tab asked within IDLE_S."""
        while self.clock() - self._asked_at < IDLE_S:
            self.read()
            await asyncio.sleep(POLL_S)

    # ---- the latest link matrix -----------------------------------------------------------

    def links(self) -> dict:
        """The latest link matrix job's result, as a heat map: rank by rank up to MAX_LINK_RANKS,
        else host by host."""
        if not self.links_job:
            return {"job_id": ""}
        job = self.core.get(self.links_job)
        lm = job.link_matrix
        ranks = sorted(job.workers, key=lambda w: w.rank)
        labels = [{"worker_id": w.worker_id, "host": w.host} for w in ranks]
        matrix = [list(row.gbps) for row in lm.matrix]
        flagged = [{"a": ln.a, "b": ln.b, "gbps": ln.gbps, "ratio": ln.ratio, "baseline_ratio": ln.baseline_ratio,
                    "latency_us": ln.latency_us, "wrong": ln.wrong} for ln in lm.links if ln.flagged]
        body = {"job_id": job.id, "finished_at": job.finished_at, "size_bytes": lm.size_bytes,
                "median_same_host_gbps": lm.median_same_host_gbps,
                "median_cross_host_gbps": lm.median_cross_host_gbps, "ranks": labels, "flagged": flagged}
        if len(matrix) <= MAX_LINK_RANKS:
            return {**body, "by": "rank", "labels": [r["worker_id"] for r in labels], "matrix": matrix}
        hosts, matrix = by_host(labels, matrix)
        return {**body, "by": "host", "labels": hosts, "matrix": matrix}


def by_host(ranks: list[dict], matrix: list[list[float]]) -> tuple[list[str], list[list[float]]]:
    """The slowest link between each pair of hosts (-1: no measured link)."""
    hosts = sorted({r["host"] for r in ranks})
    at = {h: i for i, h in enumerate(hosts)}
    out = [[-1.0] * len(hosts) for _ in hosts]
    for a, row in enumerate(matrix):
        for b, gbps in enumerate(row):
            if gbps < 0 or a >= len(ranks) or b >= len(ranks):
                continue
            i, j = at[ranks[a]["host"]], at[ranks[b]["host"]]
            out[i][j] = gbps if out[i][j] < 0 else min(out[i][j], gbps)
    return hosts, out


def router(feed: FleetFeed) -> APIRouter:
    r = APIRouter(prefix="/api/v1")

    @r.get("/fleet", tags=["workers"], operation_id="watchFleet", summary="Every worker's health, or what changed",
           description="A compact record per worker (see dashboard/fleet_view.py), the running and queued job "
                       "counts and the latest link matrix job. With `since` = the previous answer's `version`: "
                       "only the records changed since then (`full` false) and the ids gone (`removed`); "
                       "with `wait`, the answer waits up to that many seconds for a change.")
    async def watch_fleet(
        request: Request,
        since: Annotated[int, Query(ge=0, description="the version the client holds; 0: everything")] = 0,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_S, description="seconds to wait for a change")] = 0,
    ) -> Response:
        answer = await feed.next(since, wait)
        zipped = feed.gzipped(answer) if "gzip" in request.headers.get("accept-encoding", "") else None
        if zipped is None:  # the middleware compresses it where it is worth it
            return Response(feed.body(answer), media_type="application/json", headers={"Cache-Control": "no-store"})
        return Response(zipped, media_type="application/json",
                        headers={"Cache-Control": "no-store", "Content-Encoding": "gzip", "Vary": "Accept-Encoding"})

    @r.get("/fleet/links", tags=["workers"], operation_id="getFleetLinks",
           summary="The latest link matrix (a heat map: by rank, or by host for large ones), flagged links first")
    async def fleet_links() -> JSON:
        return JSON(feed.links())

    return r
