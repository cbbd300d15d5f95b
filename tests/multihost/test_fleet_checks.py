"""The link matrix finds a slow host: 8 hosts made of network namespaces (netbed.py), one CPU
worker each (gloo), the coordinator on h0. One host's cable is rate-limited with a real tc token
bucket (tbf, 200 Mbit/s, on its eth0: what leaves the host) and `ringleader check` must name
that host and no other; clean runs before it must name nobody (no false verdict). How long a
check takes is measured, not asserted (bench/fleet_checks.py; the goal is 10 s).

RINGLEADER_FLEET_CLEAN_RUNS (default 2) sets the clean runs; RINGLEADER_FLEET_REPORT, a path,
gets every run's figures as JSON (bench/fleet_checks.py runs this test with 20 and keeps that).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from cluster import ringleader_cmd
from hostcluster import bed_cluster
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.multihost

WORKERS = {f"w{i}": f"h{i}" for i in range(1, 9)}
SLOW_HOST, SLOW_WORKER = "h5", "w5"
RATE = "200mbit"
REPORT: dict = {"hosts": len(WORKERS), "rate": RATE, "clean": [], "slow": []}


def rate_limit(bed, host: str, on: bool) -> None:
    """A token bucket on the host's eth0 (what it sends), or none. The burst is small (32 KiB),
    so even the first ping-pong of a check is held to the rate."""
    from pyroute2 import NetNS

    with NetNS(bed.ns(host)) as ns:
        eth0 = ns.link_lookup(ifname="eth0")[0]
        if on:
            ns.tc("add", "tbf", index=eth0, handle="1:", rate=RATE, burst=32 << 10, latency="100ms")
        else:
            ns.tc("del", index=eth0, handle="1:", root=True)


def check(c) -> tuple[dict, float, int]:
    """`ringleader check --kind link_matrix -o json`: (its answer, seconds it took, exit code)."""
    t0 = time.monotonic()
    out = subprocess.run(ringleader_cmd("--coordinator", c.address, "check", "--kind", "link_matrix", "-o", "json"),
                         capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    assert out.stdout, out.stderr
    return json.loads(out.stdout), took, out.returncode


def _figures(answer: dict, took: float) -> dict:
    job = answer["jobs"][0]
    links = job["link_matrix"]["links"]
    verdicts = {w["worker_id"]: w["health"]["verdict"] for w in answer["workers"]}
    return {"seconds": round(took, 2), "job_seconds": round(job["finished_at"] - job["started_at"], 2),
            "named_hosts": answer.get("named_hosts", []),
            "not_healthy": sorted(w for w, v in verdicts.items() if v != "HEALTHY"),
            "flagged_links": sorted(f"{x['a']}-{x['b']}" for x in links if x.get("flagged")),
            "min_ratio": round(min(x["ratio"] for x in links), 3),
            "median_cross_host_gbps": round(job["link_matrix"]["median_cross_host_gbps"], 3),
            "warm_start": job.get("warm_start", False)}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with bed_cluster(tmp_path_factory.mktemp("fleet"), "open", WORKERS) as (bed, c):
        yield bed, c
    if os.environ.get("RINGLEADER_FLEET_REPORT"):
        with open(os.environ["RINGLEADER_FLEET_REPORT"], "w") as f:
            json.dump(REPORT, f, indent=2)


def test_clean_runs_name_nobody(fleet):
    bed, c = fleet
    runs = int(os.environ.get("RINGLEADER_FLEET_CLEAN_RUNS", "2"))
    for _ in range(runs):
        answer, took, code = check(c)
        REPORT["clean"].append(_figures(answer, took))
        job = answer["jobs"][0]
        assert job["state"] == "SUCCEEDED", job["reason"]
        assert job["link_matrix"]["rounds"] == 7 and len(job["link_matrix"]["links"]) == 28
        assert REPORT["clean"][-1]["named_hosts"] == [] and REPORT["clean"][-1]["not_healthy"] == [], REPORT["clean"][-1]
        assert code == 0


def test_a_rate_limited_host_is_named_and_no_other(fleet):
    bed, c = fleet
    rate_limit(bed, SLOW_HOST, on=True)
    try:
        answer, took, code = check(c)
    finally:
        rate_limit(bed, SLOW_HOST, on=False)
    figures = _figures(answer, took)
    REPORT["slow"].append(figures)
    assert figures["named_hosts"] == [SLOW_HOST] and figures["not_healthy"] == [SLOW_WORKER], figures
    assert code == 1  # a checked worker failed
    rank = next(w["rank"] for w in answer["jobs"][0]["workers"] if w["worker_id"] == SLOW_WORKER)
    slow_links = [x for x in answer["jobs"][0]["link_matrix"]["links"] if rank in (x.get("a", 0), x.get("b", 0))]
    assert len(slow_links) == 7 and all(x.get("flagged") for x in slow_links)
    health = {w.worker_id: w.health for w in c.client.workers()}
    assert health[SLOW_WORKER].verdict == pb.UNHEALTHY and "7 of 7" in health[SLOW_WORKER].figure
