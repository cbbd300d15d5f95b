"""Bandwidth trends in the store: the busbw of every result row with a baseline key, rolled up by
the hour as it is written, so that a month of a 5,000-worker fleet reads as (keys x hours) rows
whatever the number of jobs (dashboard/trends_api.py draws them against the baselines).

Two rollups, each row summing one hour: per baseline key (the fleet's view), and per host and key
(the host filter: a result counts for every host of its gang). A row keeps the count, sum, min
and max of busbw, the job of the lowest result (where a regression leads) and the first
JOBS_KEPT jobs of its hour (the jobs behind a point).

History is bounded (`downsample_trends(now)`, a short share each tick of the coordinator: see
Downsampling): rows older than a grain's age are merged into one row per period of that grain,
kept at the period's first hour, so a bucket that holds that hour holds all of it and a marked
point keeps its low result and its worst job. The fleet's rows stay hourly for a month (the
longest range drawn at 3 h buckets), then daily; a host's hourly for a week, daily for a month,
then weekly; nothing older than KEEP_H is kept. A key then holds at most 31 x 24 + 369 rows for
the fleet and 7 x 24 + 24 + 53 per host, whatever the number of jobs and however long the
coordinator runs. (A point written later with a time older than a window already merged stays at
its grain until KEEP_H removes it.)

The parameter and result types of the store's trend methods (coordinator/store/api.py) live
here, with the in-memory implementation (MemoryTrends, a mixin of MemoryJobStore); the SQL one is
coordinator/store/sqlite_trends.py.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Iterable

HOUR_S = 3600
JOBS_KEPT = 8  # job ids an hour's row keeps
DAY_H, WEEK_H = 24, 168
# (per host, older than this many hours, merged into periods of this many hours), finest first.
GRAINS = ((False, 31 * DAY_H, DAY_H), (True, 7 * DAY_H, DAY_H), (True, 31 * DAY_H, WEEK_H))
KEEP_H = 400 * DAY_H  # the longest range the trends answer (dashboard/trends_api.py's MAX_DAYS)
WINDOW_H, HOSTS_AT_ONCE = 7 * DAY_H, 16  # one call's share (Downsampling)
# One stored row: (host, key, hour, gpu_model, op, link, n, total, min, max, worst_job, jobs).
Row = tuple


@dataclass(frozen=True)
class TrendPoint:
    """One result row: its baseline key and the key's fields the trends filter on."""

    key: str
    gpu_model: str
    op: str
    link: str  # "local" or "cross"
    at: float  # unix seconds of the measurement
    busbw_gbps: float
    job_id: str
    hosts: tuple[str, ...] = ()  # the gang's hosts


@dataclass(frozen=True)
class TrendQuery:
    """Buckets of `step_s` (a whole number of hours) in [since, until); empty filters match all."""

    since: float
    until: float
    step_s: int = HOUR_S
    host: str = ""
    gpu_model: str = ""
    op: str = ""
    link: str = ""
    key: str = ""

    def __post_init__(self) -> None:
        if self.step_s < HOUR_S or self.step_s % HOUR_S:
            raise ValueError(f"step_s: a whole number of hours (multiple of {HOUR_S}), got {self.step_s}")
        if self.until <= self.since:
            raise ValueError(f"until ({self.until}) must be after since ({self.since})")

    @property
    def hours(self) -> tuple[int, int, int]:
        """First hour, the hour after the last, hours per bucket."""
        return int(self.since // HOUR_S), -int(-self.until // HOUR_S), self.step_s // HOUR_S


@dataclass(frozen=True)
class TrendBucket:
    key: str
    start: float  # unix seconds, a multiple of the query's step
    n: int
    mean_gbps: float
    min_gbps: float
    max_gbps: float


@dataclass(frozen=True)
class TrendHour:
    """One hour of one key (of one host): the jobs behind a point."""

    start: float
    n: int
    min_gbps: float
    worst_job: str
    jobs: tuple[str, ...]


@dataclass
class _Hour:
    n: int = 0
    total: float = 0.0
    low: float = float("inf")
    high: float = 0.0
    worst_job: str = ""
    jobs: list[str] = field(default_factory=list)

    def add(self, p: TrendPoint) -> None:
        self.n += 1
        self.total += p.busbw_gbps
        if p.busbw_gbps < self.low:
            self.low, self.worst_job = p.busbw_gbps, p.job_id
        self.high = max(self.high, p.busbw_gbps)
        if len(self.jobs) < JOBS_KEPT and p.job_id not in self.jobs:
            self.jobs.append(p.job_id)


def buckets(rows, step_h: int) -> list[TrendBucket]:
    """Hourly rows (key, hour, n, total, min, max), grouped by key and bucket, in order."""
    out: dict[tuple[str, int], list] = {}
    for key, hour, n, total, low, high in rows:
        b = out.setdefault((key, hour // step_h * step_h), [0, 0.0, float("inf"), 0.0])
        b[0] += n
        b[1] += total
        b[2] = min(b[2], low)
        b[3] = max(b[3], high)
    return [TrendBucket(key=k, start=float(h * HOUR_S), n=n, mean_gbps=t / n, min_gbps=lo, max_gbps=hi)
            for (k, h), (n, t, lo, hi) in sorted(out.items())]


def downsample(rows: Iterable[Row], grain_h: int) -> tuple[list[tuple[str, str, int]], list[Row]]:
    """`rows` merged into one per (host, key, period of `grain_h` hours): the (host, key, hour) of
    the rows replaced, and the merged rows (a period that is one row at its start is left as is)."""
    periods: dict[tuple[str, str, int], list[Row]] = {}
    for r in rows:
        periods.setdefault((r[0], r[1], r[2] // grain_h * grain_h), []).append(r)
    gone: list[tuple[str, str, int]] = []
    merged: list[Row] = []
    for (host, key, start), rs in periods.items():
        if len(rs) == 1 and rs[0][2] == start:
            continue
        rs.sort(key=lambda r: r[2])
        worst = min(rs, key=lambda r: r[8])
        jobs = tuple(dict.fromkeys(j for r in rs for j in r[11]))[:JOBS_KEPT]
        gone += [(host, key, r[2]) for r in rs]
        merged.append((host, key, start, *rs[0][3:6], sum(r[6] for r in rs), sum(r[7] for r in rs), worst[8],
                       max(r[9] for r in rs), worst[10], jobs))
    return gone, merged


@dataclass
class Downsampling:
    """Where a store's downsampling stands: per grain, the hour up to which its rows are merged
    and, in a window of hosts' rows begun, its end and the last host merged; the hour rows older
    than KEEP_H were last deleted. A call merges one window of at most WINDOW_H hours of one
    grain, and of the hosts' rows HOSTS_AT_ONCE hosts, so each call stays short on the loop."""

    done: dict[tuple[bool, int], int] = field(default_factory=dict)
    begun: dict[tuple[bool, int], tuple[int, str]] = field(default_factory=dict)
    deleted_at: int = -1
    oldest: int = 0  # the oldest row's hour when the store first looked: no window starts before it

    def next(self, now: float) -> tuple[bool, int, int, int, str] | None:
        """The next window (per host, grain, first hour, end hour, the last host merged in it),
        finest grain first; None when every grain is merged up to its age."""
        hour = int(now // HOUR_S)
        for per_host, age_h, grain_h in GRAINS:
            first = max(self.done.get((per_host, grain_h), 0), max(hour - KEEP_H, self.oldest) // grain_h * grain_h)
            if (per_host, grain_h) in self.begun:
                end, host = self.begun[(per_host, grain_h)]
                return per_host, grain_h, first, end, host
            end = min((hour - age_h) // grain_h * grain_h, first + max(grain_h, WINDOW_H // grain_h * grain_h))
            if end > first:
                return per_host, grain_h, first, end, ""
        return None

    def merged(self, per_host: bool, grain_h: int, end: int, last_host: str | None) -> None:
        """The window's hosts up to `last_host` are merged (None: all of them, the window is done)."""
        if last_host is None:
            self.done[(per_host, grain_h)] = end
            self.begun.pop((per_host, grain_h), None)
        else:
            self.begun[(per_host, grain_h)] = (end, last_host)

    def due(self, now: float) -> bool:
        """Whether a call at `now` has anything to do: a window, or this hour's delete."""
        return self.next(now) is not None or self.deleted_at != int(now // HOUR_S)


def sql_share(state: Downsampling | None, now: float, db) -> tuple[Downsampling, bool]:
    """One call's share on an SQL store, inside its transaction `db` (SqliteTrends' and the
    PostgreSQL store's: `oldest()`, `expire(hour)`, `hosts_after(host, limit)` and
    `merge(grain_h, first, end, hosts)`, hosts (after, up to) or None for the fleet's rows): the
    state it leaves (a copy: the store keeps it once the transaction commits) and whether it merged
    a window."""
    hour = int(now // HOUR_S)
    if state is None:  # the store's first share: no window starts before its oldest row
        oldest = db.oldest()
        state = Downsampling(oldest=hour if oldest is None else oldest)
    state = copy.deepcopy(state)
    if state.deleted_at != hour:
        db.expire(hour - KEEP_H)
        state.deleted_at = hour
    if (window := state.next(now)) is None:
        return state, False
    per_host, grain_h, first, end, after = window
    last, hosts = None, None
    if per_host:  # the next HOSTS_AT_ONCE hosts after the last one merged
        chunk = db.hosts_after(after, HOSTS_AT_ONCE)
        last = chunk[-1] if len(chunk) == HOSTS_AT_ONCE else None
        hosts = (after, chunk[-1] if chunk else after)
    db.merge(grain_h, first, end, hosts)
    state.merged(per_host, grain_h, end, last)
    return state, True


def one_key(q: TrendQuery) -> None:
    if not q.key:
        raise ValueError("key: the hours behind a point are those of one baseline key")


class MemoryTrends:
    """The trend methods of the in-memory store."""

    @property
    def _trend_rows(self) -> dict[tuple[str, str, str, str, str, int], _Hour]:
        # (host or "", key, gpu_model, op, link, hour) -> its hour; made on first use
        return self.__dict__.setdefault("_trend_hours", {})

    def add_trend(self, point: TrendPoint) -> None:
        hour = int(point.at // HOUR_S)
        for host in ("", *dict.fromkeys(point.hosts)):
            row = (host, point.key, point.gpu_model, point.op, point.link, hour)
            self._trend_rows.setdefault(row, _Hour()).add(point)

    def _matching(self, q: TrendQuery, key: str = ""):
        first, end, _ = q.hours
        for (host, k, model, op, link, hour), h in self._trend_rows.items():
            if (host == q.host and first <= hour < end and (not (key or q.key) or k == (key or q.key))
                    and (not q.gpu_model or model == q.gpu_model) and (not q.op or op == q.op)
                    and (not q.link or link == q.link)):
                yield k, hour, h

    def trend(self, q: TrendQuery) -> list[TrendBucket]:
        return buckets(((k, hour, h.n, h.total, h.low, h.high) for k, hour, h in self._matching(q)), q.hours[2])

    def trend_hours(self, q: TrendQuery) -> list[TrendHour]:
        one_key(q)
        hours = [TrendHour(start=float(hour * HOUR_S), n=h.n, min_gbps=h.low, worst_job=h.worst_job, jobs=tuple(h.jobs))
                 for _, hour, h in self._matching(q)]
        return sorted(hours, key=lambda t: (t.min_gbps, t.start))

    def downsample_trends(self, now: float) -> bool:
        rows = self._trend_rows
        if "_downsampling" not in self.__dict__:
            self.__dict__["_downsampling"] = Downsampling(oldest=min((k[5] for k in rows), default=int(now // HOUR_S)))
        state: Downsampling = self.__dict__["_downsampling"]
        oldest = int(now // HOUR_S) - KEEP_H
        for k in [k for k in rows if k[5] < oldest]:
            del rows[k]
        if (window := state.next(now)) is None:
            return False
        per_host, grain_h, first, end, _ = window
        found = {k: h for k, h in rows.items() if bool(k[0]) == per_host and first <= k[5] < end}
        gone, merged = downsample([(k[0], k[1], k[5], *k[2:5], h.n, h.total, h.low, h.high, h.worst_job, tuple(h.jobs))
                                   for k, h in found.items()], grain_h)
        replaced = set(gone)
        for k in found:
            if (k[0], k[1], k[5]) in replaced:
                del rows[k]
        for host, key, hour, model, op, link, count, total, low, high, worst, jobs in merged:
            rows[(host, key, model, op, link, hour)] = _Hour(count, total, low, high, worst, list(jobs))
        state.merged(per_host, grain_h, end, None)  # in memory: every host at once
        return True
