"""Scratch (kept as the record of build-cpu-abc.txt): fresh-browser loads against a URL, traced
(bench/first_render.py's trace): first render, and the renderer main thread's CPU time (busy_cpu:
all tasks to first render; build_task_cpu: the longest task after the fleet's answer, its drawing).
    PYTHONPATH=$PWD python traced_loads.py http://127.0.0.1:18765 5000 REPS"""
import sys, os, json, time, tempfile
sys.path.insert(0, os.getcwd())
from pathlib import Path
from bench.ui_fleet_browser import Browser
from bench.first_render import EXTRA_PROBE, STEPS, TRACE, trace_summary
url, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(reps):
    tmp = Path(tempfile.mkdtemp(prefix="rl-cl-"))
    tr = tmp / "trace.json"
    with Browser(tmp / "p", n, trace=(TRACE, tr, 8)) as b:
        b.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": EXTRA_PROBE})
        b.driver.get(f"{url}/healthz")
        ld = b.first_render(f"{url}/")
        p = b.js(STEPS)
        while not tr.exists(): time.sleep(0.2)
        time.sleep(1.5)
    t = trace_summary(json.loads(tr.read_text())["traceEvents"], p["marks"]["probe:start"], ld["first_render_s"] * 1000 + 50)
    fl = [r for r in p["resources"] if "fleet?since=0" in r["url"]][0]
    drawn = p["marks"].get("fleet:first-drawn")
    after = [x for x in t["longest_tasks"] if x["start_ms"] >= fl["end"] - 5]
    build = max(after, key=lambda x: x["ms"]) if after else {}
    print({"fr": round(ld["first_render_s"]*1000), "fleet_req": fl["request"], "fleet_end": fl["end"], "build": round(drawn - fl["end"], 1) if drawn else None,
           "build_task_ms": build.get("ms"), "build_task_cpu": build.get("cpu_ms"), "busy_cpu": t["busy_cpu_ms"], "busy": t["busy_ms"],
           "jobs_row": p["jobs_row_ms"], "load": round(os.getloadavg()[0], 1)}, flush=True)
