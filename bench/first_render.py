"""The overview's first render in a fresh Chromium (a new profile each load: nothing cached) at
N simulated workers, with jobs arriving, and where its time went.

    python bench/first_render.py --workers 5000 --loads 6 --feed cold --trace --py-spy PY_SPY --out FILE

The world is bench/ui_fleet.py's: a real coordinator process, N simulated daemons (8 per host),
100 GPU workers held by endless jobs, short jobs at --rate a second, 3 failed and 4 suspect
verdicts. Each load starts a new browser on a new profile, opens /healthz (the browser's own
start is not the page's), then, at once or --settle seconds later, "/" (the jobs tab; --reloads
more in the same browser after it), and times the first render as
bench/ui_fleet_browser.py does: navigation start to the frame after every worker's cell is in
the page. Beside it, from the page: navigation timing, every resource's request/first byte/last
byte and sizes, paints, the page's marks, when the first job row was in the table, and how long
each JSON body took to read and parse; with --trace, the renderer's main thread from Chromium's
trace (busy time by event, the longest tasks); with --py-spy, the coordinator's samples while
the page loaded (py-spy record, raw stacks: what its loop did); always, the CPU time each kind
of Chromium process spent while the page loaded (a browser started a moment before is still
busy with its own start). The 1-minute load average is recorded before and after each load: the
machine is shared.

--feed cold waits FEED_IDLE_S before each load, with nothing asking for the fleet, so the
coordinator's fleet feed has gone idle and its first read falls inside the page's request (an
operator opening the dashboard when nobody watches); --feed warm keeps one long-polling client
(another tab) throughout.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import loadstats  # noqa: E402
from bench.control_plane import machine, start_coordinator  # noqa: E402
from bench.simfleet import SimFleet  # noqa: E402
from bench.ui_fleet import JobTraffic, fleet_verdicts, seed_verdicts, wait_until  # noqa: E402
from bench.ui_fleet_browser import Browser  # noqa: E402

FEED_IDLE_S = 62.0  # dashboard/fleet_view.py's IDLE_S, and a poll
TRACE = "devtools.timeline,disabled-by-default-devtools.timeline,blink.user_timing,v8.execute"
TRACE_S = 20  # Chromium writes its startup trace this long after it starts

# Before the page's scripts: when the first job row is in the table, and each JSON body's read
# and parse (Response.json replaced by text() then JSON.parse, timed).
EXTRA_PROBE = """
window.__jobsRow = null; window.__json = []; performance.mark('probe:start');
new MutationObserver((_, obs) => {
  if (!document.querySelector('#jobs-body tr')) return;
  obs.disconnect(); window.__jobsRow = performance.now();
}).observe(document, {childList: true, subtree: true});
Response.prototype.json = async function () {
  const t0 = performance.now(); const text = await this.text(); const t1 = performance.now();
  const value = JSON.parse(text);
  window.__json.push({url: this.url.replace(location.origin, ''), body_read_ms: t1 - t0, parse_ms: performance.now() - t1, chars: text.length, at_ms: t0});
  return value;
};
"""
STEPS = """
const ms = (v) => +v.toFixed(1);
const n = performance.getEntriesByType('navigation')[0];
return {
  nav: {responseStart: ms(n.responseStart), responseEnd: ms(n.responseEnd), domInteractive: ms(n.domInteractive),
        domContentLoaded: ms(n.domContentLoadedEventEnd), load: ms(n.loadEventEnd), bytes: n.transferSize},
  resources: performance.getEntriesByType('resource').map((e) => ({url: e.name.replace(location.origin, ''),
    start: ms(e.startTime), request: ms(e.requestStart), first_byte: ms(e.responseStart), end: ms(e.responseEnd),
    transfer: e.transferSize, body: e.encodedBodySize, decoded: e.decodedBodySize})),
  paints: Object.fromEntries(performance.getEntriesByType('paint').map((p) => [p.name, ms(p.startTime)])),
  marks: Object.fromEntries(performance.getEntriesByType('mark').map((m) => [m.name, ms(m.startTime)])),
  jobs_row_ms: window.__jobsRow && ms(window.__jobsRow), json: window.__json, errors: window.__errors,
};
"""


def complete_spans(events: list[dict]) -> list[dict]:
    """Chromium's trace events as complete spans (ph X), begin/end pairs (B, E) joined."""
    out, open_ = [], collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            out.append(e)
        elif e.get("ph") == "B":
            open_[e["pid"], e["tid"]].append(e)
        elif e.get("ph") == "E" and open_[e["pid"], e["tid"]]:
            b = open_[e["pid"], e["tid"]].pop()
            out.append({**b, "ph": "X", "dur": e["ts"] - b["ts"], "tdur": e.get("tts", 0) - b.get("tts", 0)})
    return out


def trace_summary(events: list[dict], probe_ms: float, window_ms: float) -> dict:
    """The page's renderer main thread from navigation start to `window_ms` after it: busy time
    (top-level tasks), time by event name, and the longest tasks with their largest parts."""
    # The probe's mark, at `probe_ms` after navigation start in the page's clock, anchors it.
    marks = [e for e in events if e.get("name") == "probe:start"]
    if not marks:
        return {"error": "the probe's mark is not in the trace"}
    t0, pid, tid = marks[-1]["ts"] - probe_ms * 1000, marks[-1]["pid"], marks[-1]["tid"]
    spans = sorted((e for e in complete_spans(events) if e.get("pid") == pid and e.get("tid") == tid
                    and t0 <= e["ts"] <= t0 + window_ms * 1000), key=lambda e: (e["ts"], -e.get("dur", 0)))
    by_name: collections.Counter = collections.Counter()
    tasks, task = [], None
    for e in spans:
        dur = e.get("dur", 0) / 1000
        if e["name"] == "RunTask" and (task is None or e["ts"] >= task["end"]):
            task = {"start_ms": round((e["ts"] - t0) / 1000, 1), "ms": round(dur, 1),
                    "cpu_ms": round(e.get("tdur", 0) / 1000, 1), "end": e["ts"] + e.get("dur", 0),
                    "parts": collections.Counter()}
            tasks.append(task)
            continue
        by_name[e["name"]] += dur
        if task is not None and e["ts"] < task["end"]:
            task["parts"][e["name"]] += dur
    longest = sorted(tasks, key=lambda t: -t["ms"])[:12]
    # Wall time (ms) and the thread's CPU time (cpu_ms): on a loaded machine they part.
    return {"busy_ms": round(sum(t["ms"] for t in tasks), 1), "busy_cpu_ms": round(sum(t["cpu_ms"] for t in tasks), 1),
            "tasks": len(tasks),
            "by_name_ms": {k: round(v, 1) for k, v in by_name.most_common(25)},
            "longest_tasks": [{"start_ms": t["start_ms"], "ms": t["ms"], "cpu_ms": t["cpu_ms"],
                               "parts_ms": {k: round(v, 1) for k, v in t["parts"].most_common(6)}}
                              for t in sorted(longest, key=lambda t: t["start_ms"])]}


# What the coordinator was doing, by a frame its stack holds (a sample counts in each that matches).
SPY_PARTS = {"HTTP requests": "RequestResponseCycle.run_asgi", "fleet feed read": "FleetFeed.read",
             "fleet answer JSON": "FleetFeed.body", "gzip": "GZipResponder", "static files": "StaticFiles",
             "worker streams (edge loop)": "EdgeLoop._run", "worker messages (main loop)": "Inbox._drain",
             "control tick": "Coordinator._tick_forever"}


def py_spy_summary(raw: Path, top: int = 40) -> dict:
    """py-spy's raw stacks: samples, those waiting in the selector (idle loops), samples by part
    (SPY_PARTS), and the functions most often on the stack (inclusive) and on top of it (self)."""
    inclusive: collections.Counter = collections.Counter()
    own: collections.Counter = collections.Counter()
    parts: collections.Counter = collections.Counter()
    total = idle = 0
    for line in raw.read_text().splitlines() if raw.exists() else []:
        stack, _, count = line.rpartition(" ")
        frames = [re.sub(r" \((?:.*/)?([^/]*?)(?::\d+)?\)$", r" (\1)", f) for f in stack.split(";")]
        n = int(count)
        total += n
        if frames and frames[-1].startswith(("EpollSelector.select", "select ")):
            idle += n
            continue
        for part, frame in SPY_PARTS.items():
            parts[part] += n if frame in stack else 0
        for f in set(frames):
            inclusive[f] += n
        own[frames[-1]] += n
    return {"samples": total, "idle_in_selector": idle, "parts": dict(parts), "inclusive": inclusive.most_common(top),
            "self": own.most_common(top)}


def chromium_cpu_s(b: Browser) -> collections.Counter:
    """CPU seconds of each kind of process (browser, renderer, gpu-process, NetworkService, ...)
    under the browser's driver."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid, ppid = int(stat.parent.name), int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(pid)
    out: collections.Counter = collections.Counter()
    todo = list(children.get(b.driver.service.process.pid, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        kind, sub = re.search(r"--type=(\S+)", cmd), re.search(r"--utility-sub-type=(\S+)", cmd)
        out[sub.group(1).rsplit(".", 1)[-1] if sub else kind.group(1) if kind else "browser"] += loadstats.cpu_seconds(pid)
    return out


def load_once(a: argparse.Namespace, tmp: Path, url: str, coord_pid: int, i: int) -> dict:
    spy = None
    trace = tmp / f"trace-{i}.json"
    with Browser(tmp / f"chromium-{i}", a.workers, trace=(TRACE, trace, TRACE_S) if a.trace else None) as b:
        b.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": EXTRA_PROBE})
        b.driver.get(f"{url}/healthz")
        time.sleep(a.settle)
        if a.py_spy:
            spy_out = tmp / f"spy-{i}.txt"
            spy = subprocess.Popen([a.py_spy, "record", "--pid", str(coord_pid), "--rate", "200", "--duration",
                                    str(a.spy_s), "--format", "raw", "--nonblocking", "--output", str(spy_out)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # py-spy attached
        load = {"loadavg_before": os.getloadavg()}
        cpu0, chromium0 = loadstats.cpu_seconds(coord_pid), chromium_cpu_s(b)
        load.update(b.first_render(f"{url}/"))
        load["coordinator_cpu_s"] = round(loadstats.cpu_seconds(coord_pid) - cpu0, 2)
        chromium = chromium_cpu_s(b)
        load["chromium_cpu_s"] = {k: round(v - chromium0[k], 2) for k, v in chromium.items() if v - chromium0[k] > 0}
        load["page"] = b.js(STEPS)
        load["loadavg_after"] = os.getloadavg()
        # Then the same page again in the same browser (its cache and compiled scripts warm).
        load["reloads_s"] = [round(b.first_render(f"{url}/")["first_render_s"], 3) for _ in range(a.reloads)]
        if a.trace:
            wait_until(trace.exists, "Chromium's trace", TRACE_S + 30)
            time.sleep(2)  # written
            load["trace"] = trace_summary(json.loads(trace.read_text())["traceEvents"],
                                          load["page"]["marks"]["probe:start"], load["first_render_s"] * 1000 + 50)
    if spy:
        spy.wait(60)
        load["py_spy"] = py_spy_summary(spy_out)
    return load


def fleet_tab(url: str, stop: threading.Event) -> None:
    """Another tab following the fleet (keeps the coordinator's feed warm)."""
    version = 0
    while not stop.is_set():
        try:
            with urllib.request.urlopen(f"{url}/api/v1/fleet?since={version}&wait=25", timeout=60) as r:
                version = json.loads(r.read())["version"]
        except OSError:
            time.sleep(1)


def measure(a: argparse.Namespace, tmp: Path) -> dict:
    seed_verdicts(tmp / "jobs.db", fleet_verdicts(a.workers))
    coord, address, url = start_coordinator(tmp)
    sims, traffic, stop = SimFleet(address, a.workers), None, threading.Event()
    out: dict = {"workers": a.workers, "feed": a.feed, "settle_s": a.settle, "rate_jobs_per_s": a.rate, "machine": machine(),
                 "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "commit": a.commit, "loads": []}
    try:
        wait_until(lambda: sims.stats().registered >= a.workers, f"{a.workers} registrations")
        traffic = JobTraffic(address, a.rate, a.holds)
        time.sleep(5)
        if a.feed == "warm":
            threading.Thread(target=fleet_tab, args=(url, stop), daemon=True).start()
        for i in range(a.loads):
            time.sleep(FEED_IDLE_S if a.feed == "cold" else 3)
            load = load_once(a, tmp, url, coord.pid, i)
            out["loads"].append(load)
            print(f"load {i}: first render {load['first_render_s']:.3f} s, load {load['loadavg_before'][0]:.1f}"
                  f" -> {load['loadavg_after'][0]:.1f}", file=sys.stderr, flush=True)
        st = sims.stats()
        out["sim_streams"] = {"registered": st.registered, "dropped": st.dropped, "failed": st.failed}
    finally:
        stop.set()
        if traffic:
            traffic.stop.set()
        sims.stop()
        coord.terminate()
        coord.wait(60)
    each = [ld["first_render_s"] for ld in out["loads"]]
    out["first_render_s_each"] = [round(v, 3) for v in each]
    out["first_render_s_median"] = round(sorted(each)[len(each) // 2], 3) if each else None
    out["loadavg_1min_each"] = [round(ld["loadavg_before"][0], 1) for ld in out["loads"]]
    out["invalid"] = [f"load {i}: the page logged errors" for i, ld in enumerate(out["loads"]) if ld["page"]["errors"]]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=5000)
    ap.add_argument("--loads", type=int, default=6, help="fresh-browser loads timed")
    ap.add_argument("--feed", choices=("cold", "warm"), default="cold")
    ap.add_argument("--rate", type=float, default=2.0, help="short jobs submitted a second")
    ap.add_argument("--holds", type=int, default=100, help="GPU workers kept BUSY by an endless job")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds between the browser's start (its /healthz) and the page; 0: at once, as ui_fleet.py")
    ap.add_argument("--reloads", type=int, default=0, help="reloads timed after each first load, same browser")
    ap.add_argument("--trace", action="store_true", help="record the renderer's main thread (Chromium's trace)")
    ap.add_argument("--py-spy", default="", help="py-spy's path: sample the coordinator while the page loads")
    ap.add_argument("--spy-s", type=int, default=3, help="seconds py-spy samples, from just before navigation")
    ap.add_argument("--commit", default="", help="the commit measured, for the record")
    ap.add_argument("--out", type=Path, default=None, help="write the figures here (JSON)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rl-fr-") as tmp:
        result = measure(a, Path(tmp))
    loadstats.emit(result, a.out, result["invalid"])


if __name__ == "__main__":
    main()
