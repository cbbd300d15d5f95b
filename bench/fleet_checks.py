"""The fleet checks on 8 namespace hosts: N clean link-matrix runs, one host rate-limited (tc tbf
200mbit), N clean runs of the default `check` (every kind), then M runs with one host's link at
half the clean median throughput (a 2x slower link).

Runs tests/multihost/test_fleet_checks.py (the same bed, checks and assertions) with
RINGLEADER_FLEET_CLEAN_RUNS=N, RINGLEADER_FLEET_DEFAULT_RUNS=N, RINGLEADER_FLEET_HALF_RUNS=M, and
writes what every run measured, with the machine and its load, to OUT (JSON). Needs root
(network namespaces), as the multihost tests do. The run is valid only if the test passed (each
of its runs asserts its own scenario: nobody named when clean, the slow host alone otherwise).

    sudo python bench/fleet_checks.py --runs 20 --half-runs 5 --out bench/out/2026-11-25-fleet-checks/fleet_8hosts.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20, help="clean runs before the rate-limited one")
    p.add_argument("--half-runs", type=int, default=5, help="runs with one link at half the clean throughput")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "RINGLEADER_FLEET_CLEAN_RUNS": str(a.runs), "RINGLEADER_FLEET_DEFAULT_RUNS": str(a.runs),
           "RINGLEADER_FLEET_HALF_RUNS": str(a.half_runs), "RINGLEADER_FLEET_REPORT": str(a.out),
           "PYTHONPATH": str(ROOT)}
    load_before, started = os.getloadavg(), time.time()
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/multihost/test_fleet_checks.py"], cwd=ROOT, env=env, capture_output=True, text=True)
    report = json.loads(a.out.read_text()) if a.out.exists() else {}
    clean, default, half = report.get("clean", []), report.get("default_clean", []), report.get("half", [])
    report.update(
        machine=dict(node=platform.node(), cpus=os.cpu_count(), python=platform.python_version(),
                     kernel=platform.release()),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        load_average_before=load_before, load_average_after=os.getloadavg(),
        test_passed=test.returncode == 0, test_tail=test.stdout[-2000:],
        summary=dict(clean_runs=len(clean),
                     false_verdicts=sum(bool(r["not_healthy"]) for r in clean),
                     clean_seconds_max=max((r["seconds"] for r in clean), default=None),
                     clean_min_ratio=min((r["min_ratio"] for r in clean), default=None),
                     slow=[dict(named=r["named_hosts"], seconds=r["seconds"], within_10_s=r["seconds"] < 10)
                           for r in report.get("slow", [])],
                     default_clean_runs=len(default),
                     default_false_verdicts=sum(bool(r["not_healthy"]) for r in default),
                     half_runs=len(half), half_named_alone=sum(r["not_healthy"] == ["w5"] for r in half),
                     half_rates=sorted({r["rate"] for r in half}),
                     valid=test.returncode == 0))
    a.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["summary"], indent=2))
    return test.returncode


if __name__ == "__main__":
    sys.exit(main())
