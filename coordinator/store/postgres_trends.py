"""The PostgreSQL store's (coordinator/store/postgres.py) bandwidth trends: written with the group,
read from the server once the groups before are durable, and downsampled in the database.

Downsampling takes SQLite's steps (coordinator/store/trends.py's sql_share: which window of which
grain, and which 16 hosts, a call merges), but the merge is one set-based statement on the server:
the window's periods found, their rows deleted and merged into one row each, the jobs kept in
order, in one pass. A call on the coordinator's
loop never waits for it: it hands the share to the writer with the turn's group
(postgres_writer.Share: the same transaction, the same fence), and the next call takes up the
state the share left once it is durable. A mixin of PostgresJobStore, which provides _mem,
_write, _written, _sync, _pending, _record.
"""

from __future__ import annotations

import functools

from coordinator.store.postgres_writer import Share
from coordinator.store.sqlite_trends import TREND_UPSERT, trend_rows
from coordinator.store.trends import (JOBS_KEPT, Downsampling, TrendBucket, TrendHour, TrendPoint, TrendQuery,
                                     sql_share)


def _hosts(first: str) -> str:
    """The distinct hosts from the first one that meets `first`, in order, found one index probe
    each (a loose index scan, which PostgreSQL does not plan by itself): the whole-table statements
    below cost (hosts), not (rows), on the writer's thread."""
    return f"""WITH RECURSIVE hosts (host) AS (
        (SELECT host FROM trend_hours WHERE {first} ORDER BY host LIMIT 1)
        UNION ALL
        SELECT (SELECT t.host FROM trend_hours t WHERE t.host > hosts.host ORDER BY t.host LIMIT 1)
        FROM hosts WHERE hosts.host IS NOT NULL)"""


HOSTS_SQL = _hosts("host > %s") + " SELECT host FROM hosts WHERE host IS NOT NULL LIMIT %s"
OLDEST_SQL = _hosts("TRUE") + " SELECT min((SELECT min(t.hour) FROM trend_hours t WHERE t.host = hosts.host)) FROM hosts"
EXPIRED_SQL = _hosts("TRUE") + " DELETE FROM trend_hours t USING hosts WHERE t.host = hosts.host AND t.hour < %s"
# trends.downsample in SQL: the periods of the window that are more than one row at their start;
# their rows deleted (a statement's own deletes free their keys for its inserts) and merged: the
# first hour's key fields, the sums, the lowest min with the job behind it (the earliest on a tie),
# and the first JOBS_KEPT distinct jobs in order of hour, then of their place in the hour's list.
MERGE_SQL = """
WITH periods AS (
    SELECT host, key, hour / %(grain)s * %(grain)s AS start FROM trend_hours
    WHERE {hosts} AND hour >= %(first)s AND hour < %(end)s
    GROUP BY host, key, hour / %(grain)s
    HAVING count(*) > 1 OR min(hour) %% %(grain)s <> 0
), gone AS (
    DELETE FROM trend_hours t USING periods p
    WHERE t.host = p.host AND t.key = p.key AND t.hour >= p.start AND t.hour < p.start + %(grain)s
    RETURNING t.*, p.start
), ids AS (
    SELECT host, key, start, job, hour, ord,
           row_number() OVER (PARTITION BY host, key, start, job ORDER BY hour, ord) AS nth
    FROM gone, unnest(string_to_array(jobs, ' ')) WITH ORDINALITY AS j(job, ord) WHERE job <> ''
), kept AS (
    SELECT host, key, start, string_agg(job, ' ' ORDER BY hour, ord) AS ids FROM (
        SELECT *, row_number() OVER (PARTITION BY host, key, start ORDER BY hour, ord) AS place
        FROM ids WHERE nth = 1) AS first_seen
    WHERE place <= %(kept)s GROUP BY host, key, start
)
INSERT INTO trend_hours (host, key, hour, gpu_model, op, link, n, total_gbps, min_gbps, max_gbps, worst_job, jobs)
SELECT g.host, g.key, g.start, (array_agg(gpu_model ORDER BY hour))[1], (array_agg(op ORDER BY hour))[1],
       (array_agg(link ORDER BY hour))[1], sum(n), sum(total_gbps ORDER BY hour), min(min_gbps), max(max_gbps),
       (array_agg(worst_job ORDER BY min_gbps, hour))[1], coalesce(min(k.ids), '')
FROM gone g LEFT JOIN kept k USING (host, key, start)
GROUP BY g.host, g.key, g.start
"""


class _Share:
    """trends.sql_share's statements on the server, on the writer's cursor inside its transaction."""

    def __init__(self, cur) -> None:
        self.cur = cur

    def oldest(self) -> int | None:
        return self.cur.execute(OLDEST_SQL).fetchone()[0]

    def expire(self, before: int) -> None:
        self.cur.execute(EXPIRED_SQL, [before])

    def hosts_after(self, after: str, limit: int) -> list[str]:
        return [h for (h,) in self.cur.execute(HOSTS_SQL, [after, limit]).fetchall()]

    def merge(self, grain_h: int, first: int, end: int, hosts: tuple[str, str] | None) -> None:
        args = {"grain": grain_h, "first": first, "end": end, "kept": JOBS_KEPT}
        if hosts:
            args.update(after=hosts[0], upto=hosts[1])
        where = "host > %(after)s AND host <= %(upto)s" if hosts else "host = ''"
        self.cur.execute(MERGE_SQL.format(hosts=where), args)


def downsample_share(state: Downsampling | None, now: float, cur) -> tuple[Downsampling, bool]:
    """One call's share (trends.sql_share), run by the writer inside its transaction."""
    return sql_share(state, now, _Share(cur))


class PostgresTrends:
    _downsampled: Downsampling | None = None  # the state the last durable share left
    _share: Share | None = None  # the share handed over and not yet taken up

    def add_trend(self, point: TrendPoint) -> None:
        with self._mem:  # type: ignore[attr-defined]  # not kept in memory: trend reads go to the server
            self._write("", TREND_UPSERT, *trend_rows(point))  # type: ignore[attr-defined]
        self._written()  # type: ignore[attr-defined]

    def trend(self, query: TrendQuery) -> list[TrendBucket]:
        self._sync()  # type: ignore[attr-defined]
        return self._record.trend(query)  # type: ignore[attr-defined]

    def trend_hours(self, query: TrendQuery) -> list[TrendHour]:
        self._sync()  # type: ignore[attr-defined]
        return self._record.trend_hours(query)  # type: ignore[attr-defined]

    def downsample_trends(self, now: float) -> bool:
        """A share handed to the writer with this turn's group. With deferred commits (the
        coordinator) True at once: more may be due, the next call looks once the share is durable;
        else, as SQLite's, once it is: whether it merged a window."""
        with self._mem:  # type: ignore[attr-defined]
            if self._share is not None:
                if not self._share.done.done():
                    return True  # the last share is still being written: the next call goes on
                self._take_up()
            state = self._downsampled
            if state is not None and not state.due(now):
                return False  # nothing due: no share
            self._share = Share(functools.partial(downsample_share, state, now))
            self._write("", self._share)  # type: ignore[attr-defined]
        if self._pending is not None:  # type: ignore[attr-defined]
            return True
        try:
            self._sync()  # type: ignore[attr-defined]  # the group, and the share with it
        finally:
            with self._mem:  # type: ignore[attr-defined]
                share, self._share = self._share, None
        self._downsampled, merged = share.done.result()  # type: ignore[union-attr]
        return merged

    def _take_up(self) -> None:
        """Adopt the state the finished share left (raises what it raised: the next call does it again)."""
        share, self._share = self._share, None
        self._downsampled, _ = share.done.result()  # type: ignore[union-attr]
