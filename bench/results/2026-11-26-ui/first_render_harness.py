"""Scratch harness behind first-render-ab.json (kept as the record of how it was measured): one
coordinator, 5,000 simulated daemons and 2 jobs a second stay up; each label written to
/tmp/dash/go times page loads in Chromium: "ab:X,Y" alternates /tmp/dash/app.js.X (and
index.html.X) with Y, 6 reloads each; "coldN": N loads, each by a fresh browser profile after the
fleet feed went idle (62 s)."""

import json, os, sys, time, tempfile, urllib.request
from pathlib import Path
sys.path.insert(0, os.getcwd())
from bench.ui_fleet import fleet_verdicts, seed_verdicts, JobTraffic, wait_until
from bench.control_plane import start_coordinator
from bench.simfleet import SimFleet
from bench.ui_fleet_browser import Browser

STEPS = """
const r = performance.getEntriesByType('resource').map((e) => [e.name.replace(location.origin, ''), +(e.requestStart/1000).toFixed(3), +(e.responseEnd/1000).toFixed(3), e.transferSize]);
const n = performance.getEntriesByType('navigation')[0];
const marks = performance.getEntriesByType('mark').map((m) => [m.name, +(m.startTime/1000).toFixed(3)]);
return {nav: [+(n.responseEnd/1000).toFixed(3), +(n.domInteractive/1000).toFixed(3), +(n.domContentLoadedEventEnd/1000).toFixed(3)], res: r, marks};
"""
def main():
    N = 5000
    tmp = Path(tempfile.mkdtemp(prefix="rl-h-"))
    seed_verdicts(tmp / "jobs.db", fleet_verdicts(N))
    coord, address, url = start_coordinator(tmp)
    sims = SimFleet(address, N)
    wait_until(lambda: sims.stats().registered >= N, "reg")
    traffic = JobTraffic(address, 2.0, 100)
    time.sleep(5)
    go = Path("/tmp/dash/go")
    print("ready", url, flush=True)
    with Browser(tmp / "chromium", N) as b:
        b.driver.get(f"{url}/healthz")
        while True:
            while not go.exists():
                time.sleep(0.3)
            label = go.read_text().strip()
            go.unlink()
            if label == "quit":
                break
            out = {"label": label, "load_before": os.getloadavg(), "loads": []}
            # raw fleet request from Python
            for i in range(3):
                t = time.perf_counter(); body = urllib.request.urlopen(f"{url}/api/v1/fleet?since=0&wait=0").read()
                out.setdefault("raw_fleet", []).append([round(time.perf_counter() - t, 3), len(body)])
            time.sleep(61 if "cold" in label else 0)
            import shutil
            if label.startswith("cold"):
                for i in range(int(label[4:] or 3)):
                    time.sleep(62)  # the feed idle (IDLE_S): its next read is in the request
                    with Browser(tmp / f"chromium-cold-{label}-{i}", N) as fresh:
                        fresh.driver.get(f"{url}/healthz")
                        ld = fresh.first_render(f"{url}/")
                        ld["detail"] = fresh.js(STEPS)
                        ld["variant"] = "cold"
                        ld["loadavg"] = os.getloadavg()
                        out["loads"].append(ld)
                        print("cold", round(ld["first_render_s"], 3), ld["loadavg"], flush=True)
                Path(f"/tmp/dash/res-{label}.json").write_text(json.dumps(out, indent=1))
                continue
            variants = label.split(":")[1].split(",") if ":" in label else [None]
            reps = 7 if len(variants) == 1 else 6
            for i in range(reps):
                for v in variants:
                    if v:
                        shutil.copy(f"/tmp/dash/app.js.{v}", "dashboard/static/app.js")
                        if os.path.exists(f"/tmp/dash/index.html.{v}"):
                            shutil.copy(f"/tmp/dash/index.html.{v}", "dashboard/static/index.html")
                        b.driver.get(f"{url}/healthz")
                    ld = b.first_render(f"{url}/")
                    ld["detail"] = b.js(STEPS)
                    ld["variant"] = v
                    out["loads"].append(ld)
            out["load_after"] = os.getloadavg()
            out["errors"] = b.js("return window.__errors")
            out["summary"] = {}
            for v in variants:
                fr = [round(l["first_render_s"], 3) for l in out["loads"] if l["variant"] == v]
                out["summary"][str(v)] = {"each": fr, "median": sorted(fr)[len(fr) // 2]}
            Path(f"/tmp/dash/res-{label}.json").write_text(json.dumps(out, indent=1))
            print(label, out["summary"], out["load_before"], out["load_after"], flush=True)
    traffic.stop.set(); sims.stop(); coord.terminate(); coord.wait(60)

if __name__ == '__main__':
    main()
