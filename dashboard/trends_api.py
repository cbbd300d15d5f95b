"""Fleet bandwidth over time, under /api/v1:
    GET /trends       busbw per baseline key in buckets over hours or days, against its baseline band,
                      with the buckets that hold a low result marked; filters: host, GPU model, op, link
    GET /trends/jobs  the hours behind one point of one key: the job of the lowest result first
    GET /trends/links the link matrix over time for one host (dashboard/link_history.py)
    GET /trends/matrix the fleet's latest link matrix host by host, each pair against its
                      expectation, the worst pairs listed (dashboard/link_history.py)
    GET /trends/hosts the hosts behind a key's low results: where a regression is

Read from the store's hourly rollups (coordinator/store/trends.py), so a month of a 5,000-worker
fleet costs (keys x buckets), never (jobs); the store's reads run on a thread, off the
coordinator's loop (on PostgreSQL they wait for the groups in flight and the server). The band is
the key's baseline now (median, and the threshold below which a result is low:
coordinator/health/baselines.py); a point is marked when its lowest result falls below that
threshold. The same series go to Prometheus (trends_metrics.py).
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from coordinator.shell.facade import Coordinator
from coordinator.health import baselines
from coordinator.store.trends import HOUR_S, TrendBucket, TrendHour, TrendQuery
from dashboard import link_history
from dashboard.api import JSON
from ringleader.errors import NotFound
from ringleader.v1 import jobs_pb2 as pb

MAX_DAYS = 400
MAX_TIME = 1e11  # unix seconds (year 5138): keeps hour numbers small integers
MAX_BUCKETS = 240  # per key: the step grows with the range (3 h for a month)
STEPS_H = (1, 2, 3, 6, 12, 24, 48, 168)
MAX_KEYS = 64  # keys answered, those with a marked point first
Filter = Annotated[str, Query(max_length=128, pattern=r"^[^|\x00-\x1f]*$")]
KeyFilter = Annotated[str, Query(max_length=600, pattern=r"^[^\x00-\x1f]*$", description="one baseline key")]
Days = Annotated[float, Query(gt=0, le=MAX_DAYS, description="how far back")]
Until = Annotated[float | None, Query(ge=0, le=MAX_TIME, description="end of the range, unix seconds (default: now)")]


def step_for(since: float, until: float) -> int:
    hours = (until - since) / HOUR_S
    return HOUR_S * next((s for s in STEPS_H if hours / s <= MAX_BUCKETS), STEPS_H[-1])


def key_fields(key: str, entry) -> dict:
    """The key's fields, from its baseline entry, else from the key string (baselines.entry_key)."""
    if entry is not None:
        return {"gpu_model": entry.gpu_model, "op": entry.op, "dtype": entry.dtype, "size_bucket": entry.size_bucket,
                "ranks": entry.ranks, "hosts": entry.hosts, "link": entry.link, "mode": entry.mode, "algo": entry.algo}
    parts = (key.split("|") + [""] * 9)[:9]
    bucket = parts[3]
    return {"gpu_model": parts[0], "op": parts[1], "dtype": parts[2],
            "size_bucket": 1 << int(bucket[2:]) if bucket.startswith("2^") and bucket[2:].isdigit() else 0,
            "ranks": int(parts[4][1:] or 0) if parts[4][1:].isdigit() else 0,
            "hosts": int(parts[5][1:] or 0) if parts[5][1:].isdigit() else 0,
            "link": parts[6], "mode": parts[7], "algo": parts[8]}


def series(key: str, points: list[TrendBucket], entry) -> dict:
    threshold = baselines.threshold(entry) if entry is not None else 0.0
    band = {"median_gbps": entry.median_busbw_gbps, "threshold_gbps": threshold,
            "samples": len(entry.samples)} if entry is not None and entry.samples else None
    return {"key": key, **key_fields(key, entry), "baseline": band,
            "t": [p.start for p in points], "mean": [round(p.mean_gbps, 4) for p in points],
            "min": [round(p.min_gbps, 4) for p in points], "max": [round(p.max_gbps, 4) for p in points],
            "n": [p.n for p in points],
            "marked": [p.start for p in points if threshold > 0 and p.min_gbps < threshold]}


def trends(store, q: TrendQuery, rows: list[TrendBucket]) -> dict:
    """The answer for `q` from its buckets (`store.trend(q)`, read beforehand off the loop)."""
    by_key: dict[str, list[TrendBucket]] = {}
    for b in rows:
        by_key.setdefault(b.key, []).append(b)
    entries = {e.key: e for e in store.baselines()}
    out = [series(k, pts, entries.get(k)) for k, pts in by_key.items()]
    out.sort(key=lambda s: (not s["marked"], s["op"], s["gpu_model"], s["link"], s["ranks"], s["size_bucket"], s["key"]))
    choices = {name: sorted({getattr(e, attr) for e in entries.values()} | {s[name] for s in out})
               for name, attr in (("gpu_model", "gpu_model"), ("op", "op"), ("link", "link"))}
    return {"since": q.since, "until": q.until, "step_s": q.step_s, "keys": out[:MAX_KEYS],
            "left_off": max(0, len(out) - MAX_KEYS), "choices": choices}


MAX_HOST_JOBS = 64  # low hours whose worst job is read for the hosts of a key's low results
MATRIX_FRESH_S = 30.0  # the matrix is read again at least this often (0.5 s of a thread at 5,000 GPUs)


def low_hours(store, key: str, since: float, until: float) -> list[TrendHour]:
    """The hours of `key` in [since, until) whose lowest result is below the key's threshold
    (its baseline: none, nothing is low), the lowest first."""
    entry = store.baseline(key)
    threshold = baselines.threshold(entry) if entry is not None else 0.0
    hours = store.trend_hours(TrendQuery(since=since, until=until, step_s=HOUR_S, key=key))
    return sorted((h for h in hours if h.min_gbps < threshold), key=lambda h: (h.min_gbps, h.start))


def job_hosts(store, job_id: str) -> list[str] | None:
    """The hosts of a stored job, in rank order (None: the job is no longer stored)."""
    try:
        job = store.get(job_id)
    except NotFound:
        return None
    return list(dict.fromkeys(w.host for w in sorted(job.workers, key=lambda w: w.rank)))


def worst_hosts(store, key: str, since: float, until: float) -> dict:
    """The hosts of a key's low results, the host of the lowest first: for each low hour, the job of
    its lowest result (the rollups keep it) and that job's hosts. A host counts every low hour it was
    in; `with`: the other hosts of those jobs (a cross-host key's result is a link's)."""
    hours = low_hours(store, key, since, until)
    out: dict[str, dict] = {}
    missing = 0
    for h in hours[:MAX_HOST_JOBS]:
        hosts = job_hosts(store, h.worst_job)
        if hosts is None:
            missing += 1
            continue
        for host in hosts:
            e = out.setdefault(host, {"host": host, "low_hours": 0, "min_gbps": h.min_gbps, "job_id": h.worst_job,
                                      "at": h.start, "with": []})
            e["low_hours"] += 1
            e["with"] = sorted(set(e["with"]) | (set(hosts) - {host}))
    return {"key": key, "since": since, "until": until, "low_hours": len(hours),
            "read": min(len(hours), MAX_HOST_JOBS), "jobs_gone": missing,
            "hosts": sorted(out.values(), key=lambda e: (e["min_gbps"], -e["low_hours"], e["host"]))}


def window(days: float, until: float | None) -> tuple[float, float]:
    """(since, until) of a route's `days` back from `until` (default: now): at least an hour, the
    rollups' grain."""
    end = until if until is not None else time.time()
    return end - max(days * 86400, HOUR_S), end


def query(days: float, until: float | None, **filters) -> TrendQuery:
    since, end = window(days, until)
    return TrendQuery(since=since, until=end, step_s=step_for(since, end), **filters)


def router(core: Coordinator) -> APIRouter:
    r = APIRouter(prefix="/api/v1")

    @r.get("/trends", tags=["baselines"], operation_id="getTrends",
           summary="Busbw over time per baseline key, against its baseline band, low points marked")
    async def get_trends(
        days: Days = 7,
        until: Until = None,
        host: Filter = "", gpu_model: Filter = "", op: Filter = "", link: Filter = "", key: KeyFilter = "",
    ) -> JSON:
        q = query(days, until, host=host, gpu_model=gpu_model, op=op, link=link, key=key)
        rows = await asyncio.to_thread(core.store.trend, q)  # PostgreSQL: its server, never waited for on the loop
        return JSON(trends(core.store, q, rows), headers={"Cache-Control": "no-store"})

    @r.get("/trends/jobs", tags=["baselines"], operation_id="getTrendJobs",
           summary="The jobs behind one point of a key: its hours, the job of the lowest result first")
    async def trend_jobs(
        key: Annotated[str, Query(min_length=1, max_length=600, pattern=r"^[^\x00-\x1f]*$")],
        start: Annotated[float, Query(ge=0, le=MAX_TIME, description="the point's start (unix seconds)")],
        step_s: Annotated[int, Query(ge=HOUR_S, le=STEPS_H[-1] * HOUR_S, description="the point's width")] = HOUR_S,
        host: Filter = "",
    ) -> JSON:
        try:
            q = TrendQuery(since=start, until=start + step_s, step_s=HOUR_S * max(1, step_s // HOUR_S), host=host, key=key)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None

        def read() -> list[dict]:  # the worst job's hosts: where the point's lowest result ran
            return [{"start": h.start, "n": h.n, "min_gbps": h.min_gbps, "worst_job": h.worst_job,
                     "hosts": job_hosts(core.store, h.worst_job) or [], "jobs": list(h.jobs)}
                    for h in core.store.trend_hours(q)]

        return JSON({"key": key, "start": start, "step_s": step_s, "hours": await asyncio.to_thread(read)})

    @r.get("/trends/links", tags=["baselines"], operation_id="getHostLinkHistory",
           summary="The link matrix over time for one host: its links in each finished link_matrix check")
    async def host_link_history(
        host: Annotated[str, Query(min_length=1, max_length=128, pattern=r"^[^|\x00-\x1f]*$")],
        days: Days = 7,
        until: Until = None,
    ) -> JSON:
        # Only the store is read (its listings), so a thread may: off the loop, as the jobs' pages.
        return JSON(await asyncio.to_thread(link_history.history, core.store, host, *window(days, until)))

    _where_routes(r, core)
    return r


def _where_routes(r: APIRouter, core: Coordinator) -> None:
    """Which host or link: the hosts of a key's low results, and the link matrix host by host."""

    @r.get("/trends/hosts", tags=["baselines"], operation_id="getTrendHosts",
           summary="The hosts behind a key's low results, the host of the lowest first")
    async def trend_hosts(
        key: Annotated[str, Query(min_length=1, max_length=600, pattern=r"^[^\x00-\x1f]*$")],
        days: Days = 7,
        until: Until = None,
    ) -> JSON:
        return JSON(await asyncio.to_thread(worst_hosts, core.store, key, *window(days, until)))

    kept: dict = {"checks": 0}  # the last matrix answered, by what it was read from; finished checks counted

    def on_job_event(event: pb.JobEvent, job: pb.Job) -> None:
        if (event.WhichOneof("event") == "state" and event.state.state == pb.SUCCEEDED
                and job.spec.WhichOneof("kind") == "link_matrix"):
            kept["checks"] += 1

    core.add_listener(on_job_event)

    @r.get("/trends/matrix", tags=["baselines"], operation_id="getLinkMatrixByHost",
           summary="The fleet's latest link matrix, host by host: each pair's newest figures against their expectation")
    async def link_matrix(
        days: Annotated[float, Query(gt=0, le=MAX_DAYS, description="checks of how far back")] = 7,
        until: Until = None,
    ) -> JSON:
        # What judges a link, read here on the loop (the core's state): each worker's registered
        # model and the expectations' history medians; the store is read on a thread.
        models = {c.worker_id: c.reg.device.name for c in core.workers.connected()}
        history = link_history.HistorySnapshot(core.control.expectations)
        # Every tab polls it: answered from the last read until a check finishes, the history
        # learns, the range changes or MATRIX_FRESH_S pass (a connected worker's model: by then).
        asked = (kept["checks"], days, until, history.medians)
        if kept.get("asked") == asked and time.monotonic() - kept["at"] < MATRIX_FRESH_S:
            return JSON(kept["answer"], headers={"Cache-Control": "no-store"})
        answer = await asyncio.to_thread(link_history.fleet_matrix, core.store, *window(days, until), models, history)
        kept.update(asked=asked, at=time.monotonic(), answer=answer)
        return JSON(answer, headers={"Cache-Control": "no-store"})
