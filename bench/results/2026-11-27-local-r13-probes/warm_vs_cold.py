"""N CPU workers on this host (no namespaces): the link check K times, each line says whether its
group was warm and the median. Usage: python warm_vs_cold.py N K [pause_s]"""
import json, subprocess, sys, time, tempfile
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "tests" / "integration"), str(ROOT / "tests"), str(ROOT)]
from cluster import running, ringleader_cmd
n = int(sys.argv[1]); ids = [f"w{i}" for i in range(n)]
with tempfile.TemporaryDirectory() as tmp, running(Path(tmp), ids) as c:
    for i in range(int(sys.argv[2])):
        out = subprocess.run(ringleader_cmd("--coordinator", c.address, "check", "--kind", "link_matrix", "-o", "json"), capture_output=True, text=True)
        a = json.loads(out.stdout); job = next(j for j in a["jobs"] if "link_matrix" in j)
        lm = job["link_matrix"]
        print(i, job.get("warm_start", False), round(lm.get("median_cross_host_gbps", 0), 2), round(lm.get("median_same_host_gbps", 0), 2), sorted(round(x["gbps"], 2) for x in lm["links"])[:6], flush=True)
        time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 0)
