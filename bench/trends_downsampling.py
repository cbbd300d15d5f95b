"""Trend downsampling on SQLite and on PostgreSQL, on the same history: bench/trends_history.py's
fleet (5,000 GPUs, 90 days by default) written once into an SQLite store, its trend rows copied
into a PostgreSQL store of the bench's own (tests/pgserver.py; ANALYZEd after the copy, as
autovacuum would), then each downsampled as the coordinator does: a call a turn of its loop, the
turn's commit waited for, until a call finds none due.

    python bench/trends_downsampling.py --workers 5000 --days 90 --out bench/out/.../downsampling.json

Measured, per store: rows (the fleet's, the hosts') before and after; the calls; the time the
calls themselves took (on the coordinator's loop: SQLite merges there, PostgreSQL only hands the
share over) and the time the commits took (PostgreSQL: the share, on the writer's thread): in all,
the median, p99, longest (and which call it was) and the first call's (it reads the oldest hour
and deletes what is older than KEEP_H: both walk the whole table); the whole. The run is invalid (exit 1) unless both stores hold the same rows after,
field by field (the totals within 1e-9), and each store's count of results is what was written.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import loadstats  # noqa: E402
from bench.control_plane import machine, postgres_server  # noqa: E402
from bench.trends_history import write_month  # noqa: E402
from coordinator.store.postgres import PostgresJobStore  # noqa: E402
from coordinator.store.sqlite import SqliteJobStore  # noqa: E402
from coordinator.store.trends import JOBS_KEPT  # noqa: E402

COLUMNS = "host, key, hour, gpu_model, op, link, n, total_gbps, min_gbps, max_gbps, worst_job, jobs"
COUNT_SQL = "SELECT SUM(CASE WHEN host = '' THEN 1 ELSE 0 END), SUM(CASE WHEN host <> '' THEN 1 ELSE 0 END), SUM(n) FROM trend_hours"


def counts(connect, where) -> dict:
    with connect(where) as conn:
        fleet, hosts, results = conn.execute(COUNT_SQL).fetchone()
    return {"fleet_rows": int(fleet), "host_rows": int(hosts), "rows": int(fleet) + int(hosts), "n_sum": int(results)}


def copy_rows(db: Path, dsn: str) -> None:
    with sqlite3.connect(db) as src, psycopg.connect(dsn, autocommit=True) as dst:
        with dst.cursor() as cur, cur.copy(f"COPY trend_hours ({COLUMNS}) FROM STDIN") as copy:
            for row in src.execute(f"SELECT {COLUMNS} FROM trend_hours"):
                copy.write_row(row)
        dst.execute("ANALYZE trend_hours")


def downsample(store, now: float) -> dict:
    """As the coordinator's tick: a call, then the turn's commit, waited for; until none is due."""
    calls, commits = [], []
    t_all = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        more = store.downsample_trends(now)
        t1 = time.perf_counter()
        later = store.commit()
        if later is not None:
            later.result()
        calls.append(t1 - t0)
        commits.append(time.perf_counter() - t1)
        if not more:
            break
    return {"calls": len(calls), "wall_s": round(time.perf_counter() - t_all, 2),
            "in_calls_s": round(sum(calls), 3), "call_s": spread(calls),
            "in_commits_s": round(sum(commits), 2), "commit_s": spread(commits), "load_after": os.getloadavg()}


def spread(times: list[float]) -> dict:
    """The median, p99 and longest of `times`, with which call was the longest (0: the first)."""
    ordered = sorted(times)
    return {"p50": round(ordered[len(ordered) // 2], 4), "p99": round(ordered[int(len(ordered) * 0.99)], 4),
            "max": round(ordered[-1], 4), "longest_was_call": times.index(ordered[-1]), "first": round(times[0], 4)}


def rows(conn):
    """Every row in (host, key, hour) order, its jobs as the reads see them."""
    for r in conn.execute(f"SELECT {COLUMNS} FROM trend_hours ORDER BY host, key, hour"):
        yield (*r[:11], tuple(dict.fromkeys(r[11].split()))[:JOBS_KEPT])


def differences(db: Path, dsn: str) -> dict:
    out = {"rows_compared": 0, "differ": 0, "totals_not_bit_equal": 0, "first_difference": None}
    with sqlite3.connect(db) as a, psycopg.connect(dsn) as b:
        missing = object()
        for x, y in itertools.zip_longest(rows(a), rows(b), fillvalue=missing):
            out["rows_compared"] += 1
            same = x is not missing and y is not missing and x[:7] + x[8:] == y[:7] + y[8:]
            if same and x[7] != y[7]:
                out["totals_not_bit_equal"] += 1
                same = abs(x[7] - y[7]) <= 1e-9 * abs(x[7])
            if not same:
                out["differ"] += 1
                out["first_difference"] = out["first_difference"] or [repr(x), repr(y)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=5000)
    ap.add_argument("--days", type=int, default=90)
    ap.add_argument("--commit", default="")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    out: dict = {"workers": a.workers, "days": a.days, "commit": a.commit, "machine": machine(),
                 "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "load_before": os.getloadavg()}
    server = postgres_server()
    with tempfile.TemporaryDirectory(prefix="rl-downsampling-") as tmp:
        db, now = Path(tmp) / "jobs.db", time.time()
        store = SqliteJobStore(db)
        store.defer_commits(lambda: None)
        t0 = time.perf_counter()
        history = write_month(store, a.workers, a.days, until=now)
        store.commit()
        out["results_written"], out["write_s"] = history.points, round(time.perf_counter() - t0, 1)
        dsn = server.new_schema("downsampling")
        PostgresJobStore(dsn).close()  # the schema, by the store's own migrations
        t0 = time.perf_counter()
        copy_rows(db, dsn)
        out["copy_s"] = round(time.perf_counter() - t0, 1)
        pg = PostgresJobStore(dsn)
        pg.defer_commits(lambda: None)
        out["sqlite"] = {"before": counts(sqlite3.connect, db)}
        out["postgres"] = {"before": counts(psycopg.connect, dsn)}
        out["sqlite"]["downsampling"] = downsample(store, now)
        out["postgres"]["downsampling"] = downsample(pg, now)
        store.close()
        pg.close()
        out["sqlite"]["after"] = counts(sqlite3.connect, db)
        out["postgres"]["after"] = counts(psycopg.connect, dsn)
        out["compared"] = differences(db, dsn)
    out["load_after"] = os.getloadavg()
    invalid = []
    if out["compared"]["differ"]:
        invalid.append(f"{out['compared']['differ']} rows differ between the stores")
    for name in ("sqlite", "postgres"):
        if not out[name]["before"]["n_sum"] == out[name]["after"]["n_sum"] == out["sqlite"]["before"]["n_sum"]:
            invalid.append(f"{name}: results counted before and after differ")
    loadstats.emit(out, a.out, invalid)


if __name__ == "__main__":
    main()
