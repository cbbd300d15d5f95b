"""The PostgreSQL store's (coordinator/store/postgres.py) trend downsampling in the database: the
share its writer runs (coordinator/store/behind_trends.py hands it over, with a turn's group: the
same transaction, the same fence).

Downsampling takes SQLite's steps (coordinator/store/trends.py's sql_share: which window of which
grain, and which 16 hosts, a call merges), but the merge is one set-based statement on the server:
the window's periods found, their rows deleted and merged into one row each, the jobs kept in
order, in one pass.
"""

from __future__ import annotations

from coordinator.store.trends import JOBS_KEPT, Downsampling, sql_share


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
