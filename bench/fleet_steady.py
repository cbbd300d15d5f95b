"""Fleet checks fast and steady on a slow link, on the 8-host namespace bed, beside a parallel test
load: runs tests/multihost/test_fleet_steady.py and test_fleet_sweeps_bed.py (the same beds,
scenarios and assertions) at full scale and writes what every run measured to OUT (JSON):

- the default check with h5 at each rate, --runs times, each beside a clean one just before:
  the medians and their ratio (goal: the slow ones within 3x the clean ones), h5 named alone;
- a 200 Mbit/s step in h5's links: the link check that raised it (goal: within 3), the
  links' baselines before and after (goal: within 10 %);
- --rechecks rechecks of a still-slow h5: how many released it (goal: 0);
- --limited-s of sweeps with h5 at a constant 3 Gbit/s: its verdict changes (goal: one verdict);
- --traffic-s of sweeps beside a user job every 15 s: every kind on every worker, user waits.

The load: `--load N` processes each running the unit tests in a loop (0: none). Needs root
(network namespaces). The run is valid only if both test files passed.

    sudo python bench/fleet_steady.py --runs 10 --rechecks 22 --limited-s 600 --traffic-s 1200 --out OUT.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load(n: int) -> list[subprocess.Popen]:
    loop = f"while true; do {sys.executable} -m pytest -q -x -p no:cacheprovider tests/unit >/dev/null 2>&1; done"
    return [subprocess.Popen(["bash", "-c", loop], cwd=ROOT, start_new_session=True) for _ in range(n)]


def _pytest(path: str, env: dict) -> tuple[bool, str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    return out.returncode == 0, out.stdout[-3000:]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10, help="default checks per rate (each beside a clean one)")
    p.add_argument("--rates", default="200mbit,50mbit")
    p.add_argument("--rechecks", type=int, default=22)
    p.add_argument("--limited-s", type=float, default=600.0)
    p.add_argument("--traffic-s", type=float, default=1200.0)
    p.add_argument("--load", type=int, default=1, help="processes running the unit tests in a loop beside the beds")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="fleet-steady-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RINGLEADER_STEADY_RUNS": str(a.runs), "RINGLEADER_STEADY_RATES": a.rates,
           "RINGLEADER_STEADY_RECHECKS": str(a.rechecks), "RINGLEADER_STEADY_REPORT": str(tmp / "steady.json"),
           "RINGLEADER_SWEEPS_LIMITED_S": str(a.limited_s), "RINGLEADER_SWEEPS_TRAFFIC_S": str(a.traffic_s),
           "RINGLEADER_SWEEPS_REPORT": str(tmp / "sweeps.json")}
    started, loads, load_seen = time.time(), _load(a.load), []
    try:
        steady_ok, steady_tail = _pytest("tests/multihost/test_fleet_steady.py", env)
        load_seen.append(os.getloadavg())
        sweeps_ok, sweeps_tail = _pytest("tests/multihost/test_fleet_sweeps_bed.py", env)
        load_seen.append(os.getloadavg())
    finally:
        for proc in loads:
            subprocess.run(["kill", "--", f"-{proc.pid}"], capture_output=True)
    steady = json.loads((tmp / "steady.json").read_text()) if (tmp / "steady.json").exists() else {}
    sweeps = json.loads((tmp / "sweeps.json").read_text()) if (tmp / "sweeps.json").exists() else {}
    by_rate = {}
    for rate in a.rates.split(","):
        rows = [r for r in steady.get("default", []) if r["rate"] == rate]
        if rows:
            clean, slow = statistics.median(r["clean_s"] for r in rows), statistics.median(r["slow_s"] for r in rows)
            by_rate[rate] = {"runs": len(rows), "clean_median_s": clean, "slow_median_s": slow,
                             "ratio": round(slow / clean, 2), "named_alone": sum(r["not_healthy"] == ["w5"] for r in rows),
                             "within_3x": slow <= 3 * clean}
    step = steady.get("step", {})
    report = {
        "machine": dict(node=platform.node(), cpus=os.cpu_count(), python=platform.python_version(), kernel=platform.release()),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)), "load_average": load_seen,
        "args": vars(a) | {"out": str(a.out)}, "valid": steady_ok and sweeps_ok,
        "summary": {"default_check": by_rate,
                    "step": {"raised_at_check": step.get("raised_at_check"),
                             "baseline_moved_max": max((abs(step["after"][k] / v - 1) for k, v in step.get("before", {}).items()),
                                                       default=None)},
                    "rechecks": {"n": len(steady.get("rechecks", [])),
                                 "released": sum(r["verdict"] != "UNHEALTHY" or r["worker_state"] != "QUARANTINED"
                                                 for r in steady.get("rechecks", []))},
                    "limited": {k: v for k, v in sweeps.get("limited", {}).items() if k != "changes"}
                    | {"slow_worker_changes": [x for x in sweeps.get("limited", {}).get("changes", []) if x[1] == "w5"]},
                    "traffic": sweeps.get("traffic", {})},
        "steady": steady, "sweeps": sweeps, "tails": {"steady": steady_tail, "sweeps": sweeps_tail}}
    a.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["summary"], indent=2))
    print("VALID" if report["valid"] else "INVALID: a test failed (see tails in the report)")
    return 0 if report["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
