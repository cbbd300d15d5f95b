"""How bed-warm-vs-cold-slow-start.jsonl was made: copied into tests/multihost/ as a test module
(it uses test_fleet_checks.py's bed fixture), run 4 times on fresh beds, SS0 unset / set / unset /
set, with LC_OUT=FILE LC_RUNS=8: 8 link checks a bed, each line its median and whether its group
was warm; SS0=1 sets net.ipv4.tcp_slow_start_after_idle=0 in every host's namespace first."""
import json, os, subprocess
import pytest
from test_fleet_checks import check, fleet, WORKERS  # noqa: F401
pytestmark = pytest.mark.multihost


@pytest.mark.timeout(3600)
def test_probe(fleet):
    bed, c = fleet
    if os.environ.get("SS0"):
        for h in bed.hosts:
            subprocess.run(["ip", "netns", "exec", bed.ns(h), "sysctl", "-qw", "net.ipv4.tcp_slow_start_after_idle=0"], check=True)
    out = open(os.environ["LC_OUT"], "a")
    for i in range(int(os.environ.get("LC_RUNS", "10"))):
        answer, took, code = check(c)
        job = next(j for j in answer["jobs"] if "link_matrix" in j)
        lm = job["link_matrix"]
        out.write(json.dumps({"ss0": bool(os.environ.get("SS0")), "took": round(took, 1), "med": round(lm["median_cross_host_gbps"], 2),
                              "flag": round(lm["flag_cross_host_gbps"], 2), "warm": job.get("warm_start", False)}) + "\n"); out.flush()
