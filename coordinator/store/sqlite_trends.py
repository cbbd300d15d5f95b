"""The SQLite store's bandwidth trends (coordinator/store/trends.py explains the rollups), as a mixin
of SqliteJobStore (which provides `_tx`). Plain SQL a PostgreSQL store can share: upserts with
ON CONFLICT ... DO UPDATE, CASE instead of two-argument MIN/MAX, `?` placeholders."""

from __future__ import annotations

from coordinator.store.trends import (HOSTS_AT_ONCE, HOUR_S, JOBS_KEPT, KEEP_H, Downsampling, TrendBucket, TrendHour,
                                     TrendPoint, TrendQuery, buckets, downsample, one_key)

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


class SqliteTrends:
    def add_trend(self, point: TrendPoint) -> None:
        with self._tx(write=True) as c:  # type: ignore[attr-defined]
            c.executemany(TREND_UPSERT, trend_rows(point))

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
        hour = int(now // HOUR_S)
        if "_downsampling" not in self.__dict__:
            with self._tx() as c:  # type: ignore[attr-defined]
                oldest = c.execute("SELECT MIN(hour) FROM trend_hours").fetchone()[0]
            self.__dict__["_downsampling"] = Downsampling(oldest=hour if oldest is None else oldest)
        state: Downsampling = self.__dict__["_downsampling"]
        window = state.next(now)
        if window is None and state.deleted_at == hour:
            return False  # nothing due: no transaction
        with self._tx(write=True) as c:  # type: ignore[attr-defined]
            if state.deleted_at != hour:
                c.execute("DELETE FROM trend_hours WHERE hour < ?", [hour - KEEP_H])
                state.deleted_at = hour
            if window is None:
                return False
            per_host, grain_h, first, end, after = window
            last: str | None = None
            if per_host:  # the next HOSTS_AT_ONCE hosts after the last one merged
                hosts = [h for (h,) in c.execute("SELECT DISTINCT host FROM trend_hours WHERE host > ? ORDER BY host LIMIT ?",
                                                 [after, HOSTS_AT_ONCE])]
                last = hosts[-1] if len(hosts) == HOSTS_AT_ONCE else None
                where, args = "host > ? AND host <= ?", [after, hosts[-1] if hosts else after]
            else:
                where, args = "host = ?", [""]
            rows = c.execute(f"SELECT {_COLUMNS} FROM trend_hours WHERE {where} AND hour >= ? AND hour < ?",
                             [*args, first, end]).fetchall()
            gone, merged = downsample([(*r[:11], tuple(r[11].split())) for r in rows], grain_h)
            c.executemany("DELETE FROM trend_hours WHERE host = ? AND key = ? AND hour = ?", gone)
            c.executemany(f"INSERT INTO trend_hours ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                          [(*m[:11], " ".join(m[11])) for m in merged])
            state.merged(per_host, grain_h, end, last)
        return True
