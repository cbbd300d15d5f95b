"""The SQLite store's bandwidth trends (coordinator/store/trends.py explains the rollups), as a mixin
of SqliteJobStore (which provides `_tx`). Plain SQL a PostgreSQL store can share: upserts with
ON CONFLICT ... DO UPDATE, CASE instead of two-argument MIN/MAX, `?` placeholders."""

from __future__ import annotations

import functools

from coordinator.store.trends import (HOUR_S, JOBS_KEPT, Downsampling, TrendBucket, TrendHour, TrendPoint, TrendQuery,
                                     buckets, downsample, one_key, sql_share)

# host is "" in the fleet's rollup; one table keeps both, its primary key led by host.
TREND_UPSERT = f"""
INSERT INTO trend_hours (host, key, hour, gpu_model, op, link, n, total_gbps, min_gbps, max_gbps, worst_job, jobs)
VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?)
ON CONFLICT (host, key, hour) DO UPDATE SET
  n = trend_hours.n + 1,
  total_gbps = trend_hours.total_gbps + excluded.total_gbps,
  worst_job = CASE WHEN excluded.min_gbps < trend_hours.min_gbps THEN excluded.worst_job ELSE trend_hours.worst_job END,
  min_gbps = CASE WHEN excluded.min_gbps < trend_hours.min_gbps THEN excluded.min_gbps ELSE trend_hours.min_gbps END,
  max_gbps = CASE WHEN excluded.max_gbps > trend_hours.max_gbps THEN excluded.max_gbps ELSE trend_hours.max_gbps END,
  jobs = CASE WHEN trend_hours.n < {JOBS_KEPT} THEN trend_hours.jobs || ' ' || excluded.jobs ELSE trend_hours.jobs END
"""


_COLUMNS = "host, key, hour, gpu_model, op, link, n, total_gbps, min_gbps, max_gbps, worst_job, jobs"


def _where(q: TrendQuery) -> tuple[str, list]:
    first, end, _ = q.hours
    sql, args = "host = ? AND hour >= ? AND hour < ?", [q.host, first, end]
    for column, value in (("key", q.key), ("gpu_model", q.gpu_model), ("op", q.op), ("link", q.link)):
        if value:
            sql += f" AND {column} = ?"
            args.append(value)
    return sql, args


def trend_rows(point: TrendPoint) -> list[tuple]:
    """TREND_UPSERT's rows for one point: the fleet's (host "") and each of its hosts'."""
    hour, v = int(point.at // HOUR_S), point.busbw_gbps
    return [(host, point.key, hour, point.gpu_model, point.op, point.link, v, v, v, point.job_id, point.job_id)
            for host in ("", *dict.fromkeys(point.hosts))]


_ONE_ROW = "(?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?)"


@functools.lru_cache(maxsize=64)
def trend_upsert(n: int) -> str:
    """TREND_UPSERT of `n` rows in one statement: a point's rows (the fleet's and each host's)
    were a savepoint and a statement each, every one of them a turn of the GIL (sqlite.py's _tx)."""
    return TREND_UPSERT.replace(_ONE_ROW, ", ".join([_ONE_ROW] * n))


class SqliteTrends:
    def add_trend(self, point: TrendPoint) -> None:
        rows = trend_rows(point)
        with self._tx(write=True, one=True) as c:  # type: ignore[attr-defined]
            c.execute(trend_upsert(len(rows)), [v for row in rows for v in row])

    def trend(self, q: TrendQuery) -> list[TrendBucket]:
        where, args = _where(q)
        step = q.hours[2]
        # Summed into buckets by the database; `buckets` only orders them (and merges nothing).
        sql = (f"SELECT key, (hour / ?) * ? AS b, SUM(n), SUM(total_gbps), MIN(min_gbps), MAX(max_gbps) "
               f"FROM trend_hours WHERE {where} GROUP BY key, b")
        with self._tx() as c:  # type: ignore[attr-defined]
            rows = c.execute(sql, [step, step, *args]).fetchall()
        return buckets(rows, step)

    def trend_hours(self, q: TrendQuery) -> list[TrendHour]:
        one_key(q)
        where, args = _where(q)
        with self._tx() as c:  # type: ignore[attr-defined]
            rows = c.execute(f"SELECT hour, n, min_gbps, worst_job, jobs FROM trend_hours WHERE {where} "
                             "ORDER BY min_gbps, hour", args).fetchall()
        return [TrendHour(start=float(hour * HOUR_S), n=n, min_gbps=low, worst_job=worst,
                          jobs=tuple(dict.fromkeys(jobs.split()))[:JOBS_KEPT]) for hour, n, low, worst, jobs in rows]

    def downsample_trends(self, now: float) -> bool:
        state: Downsampling | None = self.__dict__.get("_downsampling")
        if state is not None and not state.due(now):
            return False  # nothing due: no transaction
        with self._tx(write=True) as c:  # type: ignore[attr-defined]
            state, merged = downsample_share(state, now, c)
        self.__dict__["_downsampling"] = state
        return merged


class _Share:
    """trends.sql_share's statements in SQLite: the merge itself in Python (trends.downsample)."""

    def __init__(self, c) -> None:
        self.c = c

    def oldest(self) -> int | None:
        return self.c.execute("SELECT MIN(hour) FROM trend_hours").fetchone()[0]

    def expire(self, before: int) -> None:
        self.c.execute("DELETE FROM trend_hours WHERE hour < ?", [before])

    def hosts_after(self, after: str, limit: int) -> list[str]:
        return [h for (h,) in self.c.execute("SELECT DISTINCT host FROM trend_hours WHERE host > ? ORDER BY host LIMIT ?",
                                             [after, limit])]

    def merge(self, grain_h: int, first: int, end: int, hosts: tuple[str, str] | None) -> None:
        where, args = ("host > ? AND host <= ?", list(hosts)) if hosts else ("host = ?", [""])
        rows = self.c.execute(f"SELECT {_COLUMNS} FROM trend_hours WHERE {where} AND hour >= ? AND hour < ?",
                              [*args, first, end]).fetchall()
        gone, merged = downsample([(*r[:11], tuple(r[11].split())) for r in rows], grain_h)
        self.c.executemany("DELETE FROM trend_hours WHERE host = ? AND key = ? AND hour = ?", gone)
        self.c.executemany(f"INSERT INTO trend_hours ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           [(*m[:11], " ".join(m[11])) for m in merged])


def downsample_share(state: Downsampling | None, now: float, c) -> tuple[Downsampling, bool]:
    """One call's share (trends.sql_share) in SQLite, run by a write-behind store's writer inside
    its transaction (coordinator/store/behind_trends.py)."""
    return sql_share(state, now, _Share(c))
