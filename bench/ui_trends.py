"""The "Bandwidth over time" tab on months of history for a simulated fleet, in headless Chromium:
bench/trends_history.py's fleet (5,000 GPUs by default, one regression in the last days) written
into an SQLite store, downsampled as the coordinator does once an hour, then served by a real
coordinator process.

    python bench/ui_trends.py --workers 5000 --days 90 --out bench/out/2026-11-26-ui/trends.json

Measured:
- the store: trend rows (the fleet's and the hosts') before and after `downsample_trends`, called
  until none is due as the coordinator's tick does: the calls, their total and the longest;
- REST: GET /api/v1/trends?days=30 as the browser asks it (gzip), --loads times;
- the tab: from choosing "30 days" to every chart of the month drawn (the page's own
  `loadedMs`: request, answer and drawing), --loads times, alternating with 7 days.
The run is invalid (exit 1) unless the month's answer lists the regressed key first with between
1 and REGRESSED_DAYS buckets marked, and no other key marked.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import loadstats  # noqa: E402
from bench.control_plane import machine, start_coordinator  # noqa: E402
from bench.trends_history import REGRESSED_DAYS, write_month  # noqa: E402
from bench.ui_fleet_browser import Browser  # noqa: E402
from coordinator.store.sqlite import SqliteJobStore  # noqa: E402

MONTH_STEP_S = 3 * 3600  # dashboard/trends_api.py's step for 30 days


def rows(db: Path) -> dict:
    import sqlite3

    with sqlite3.connect(db) as c:
        fleet, hosts = c.execute("SELECT SUM(host = ''), SUM(host != '') FROM trend_hours").fetchone()
    return {"fleet_rows": fleet, "host_rows": hosts}


def write(db: Path, workers: int, days: int) -> tuple[dict, object]:
    store = SqliteJobStore(db)
    store.defer_commits(lambda: None)
    t0 = time.perf_counter()
    history = write_month(store, workers, days)
    store.commit()
    out = {"results": history.points, "keys": history.keys, "write_s": round(time.perf_counter() - t0, 1),
           "before_downsampling": rows(db)}
    calls, now = [], time.time()  # as the coordinator does, a share a tick, until none is due
    while True:
        t0 = time.perf_counter()
        more = store.downsample_trends(now)
        calls.append(time.perf_counter() - t0)
        if not more:
            break
    store.commit()
    out["downsampling"] = {"calls": len(calls), "total_s": round(sum(calls), 2), "longest_call_s": round(max(calls), 3)}
    store.close()
    out["after_downsampling"] = rows(db)
    return out, history


def rest_times(url: str, loads: int) -> list[float]:
    times = []
    for _ in range(loads):
        req = urllib.request.Request(f"{url}/api/v1/trends?days=30", headers={"Accept-Encoding": "gzip"})
        t0 = time.perf_counter()
        urllib.request.urlopen(req, timeout=60).read()
        times.append(round(time.perf_counter() - t0, 3))
    return times


def tab_times(browser: Browser, url: str, loads: int) -> tuple[list[float], dict]:
    """Each month's load as the page timed it (ms -> s), and what the last month's answer showed."""
    from selenium.webdriver.support.ui import Select, WebDriverWait

    d = browser.driver
    d.get(f"{url}/#trends")
    WebDriverWait(d, 120).until(lambda _: browser.js("return document.querySelectorAll('.trend-card').length > 0"))
    times = []
    for _ in range(loads):
        for days, step in (("7", 3600), ("30", MONTH_STEP_S)):
            Select(d.find_element("id", "trends-days")).select_by_value(days)
            WebDriverWait(d, 120).until(lambda _: browser.js(
                f"const t = window.ringleaderTrends; return t.answer && t.answer.step_s === {step} && "
                f"document.querySelectorAll('.trend-card').length === t.answer.keys.length && t.loadedMs"))
        times.append(round(browser.js("return window.ringleaderTrends.loadedMs") / 1000, 3))
    shown = browser.js("""return {keys: window.ringleaderTrends.answer.keys.map((k) => [k.key, k.marked.length]),
        cards: [...document.querySelectorAll('.trend-card')].map((c) => c.dataset.key),
        marks: document.querySelectorAll('.trend-card.trend-low .trend-mark').length}""")
    return times, shown


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=5000)
    ap.add_argument("--days", type=int, default=90, help="history written (the tab draws the last 30)")
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--commit", default="")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    out: dict = {"workers": a.workers, "days": a.days, "commit": a.commit, "machine": machine(),
                 "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "loadavg_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="rl-trends-") as tmp:
        store, history = write(Path(tmp) / "jobs.db", a.workers, a.days)
        out["store"] = store
        coord, _, url = start_coordinator(Path(tmp))
        try:
            out["rest_month_s"] = rest_times(url, a.loads)
            with Browser(Path(tmp) / "chromium", 0) as browser:
                out["tab_month_s"], shown = tab_times(browser, url, a.loads)
        finally:
            coord.terminate()
            coord.wait(60)
    out["loadavg"] = os.getloadavg()
    marked = {k: n for k, n in shown["keys"] if n}
    out["shown"] = {"first_card": shown["cards"][0], "marked_keys": marked, "marks_drawn": shown["marks"]}
    out["invalid"] = [] if (shown["cards"][0] == history.key and list(marked) == [history.key]
                            and 1 <= marked[history.key] <= REGRESSED_DAYS) else ["the regression is not what the tab marks"]
    loadstats.emit(out, a.out, out["invalid"])


if __name__ == "__main__":
    main()
