"""What the fleet-check beds share (tests/multihost/test_fleet_*.py): 8 hosts h1-h8 of one CPU worker
each (netbed.py, hostcluster.py), a slow host made with a real tc token bucket, and `ringleader
check -o json` run as an operator would, with what each run measured."""

from __future__ import annotations

import datetime
import json
import subprocess
import time

from cluster import ringleader_cmd

WORKERS = {f"w{i}": f"h{i}" for i in range(1, 9)}
SLOW_HOST, SLOW_WORKER = "h5", "w5"


def rate_limit(bed, host: str, on: bool, rate: str = "200mbit", both: bool = False) -> None:
    """NetBed.rate_limit with a small burst (32 KiB), so even the first ping-pong of a check is
    held to the rate: on the host's eth0 (what it sends), with `both` on its switch port too."""
    bed.rate_limit(host, rate, on=on, both=both, burst="32kb", latency="100ms")


def check(c, kinds: str = "link_matrix") -> tuple[dict, float, int]:
    """`ringleader check --kind KINDS -o json`: (its answer, seconds it took, exit code)."""
    t0 = time.monotonic()
    out = subprocess.run(ringleader_cmd("--coordinator", c.address, "check", "--kind", kinds, "-o", "json"),
                         capture_output=True, text=True, timeout=180)
    took = time.monotonic() - t0
    assert out.stdout, out.stderr
    return json.loads(out.stdout), took, out.returncode


def _epoch(rfc3339: str) -> float:
    """`check -o json` writes times as the CLI's JSON does: RFC 3339."""
    return datetime.datetime.fromisoformat(rfc3339).timestamp()


def _figures(answer: dict, took: float) -> dict:
    job = next(j for j in answer["jobs"] if "link_matrix" in j)
    links = job["link_matrix"]["links"]
    verdicts = {w["worker_id"]: w["health"]["verdict"] for w in answer["workers"]}
    return {"seconds": round(took, 2), "job_seconds": round(_epoch(job["finished_at"]) - _epoch(job["started_at"]), 2),
            "checks": {next(k for k in ("link_matrix", "gpu_check", "sdc_check") if k in j["spec"]): j["state"]
                       for j in answer["jobs"]},
            "verdicts": {w: v for w, v in verdicts.items() if v != "HEALTHY"},
            "evidence": {w["worker_id"]: f'{w["health"].get("check")}: {w["health"].get("figure", "")}'[:200]
                         for w in answer["workers"] if w["health"]["verdict"] != "HEALTHY"},
            "size_bytes": int(job["link_matrix"].get("size_bytes", 0)),
            "flag_cross_host_gbps": round(job["link_matrix"].get("flag_cross_host_gbps", 0.0), 3),
            "named_hosts": answer.get("named_hosts", []),
            "not_healthy": sorted(w for w, v in verdicts.items() if v != "HEALTHY"),
            "link_not_healthy": sorted(w["worker_id"] for w in answer["workers"]
                                       if w["health"]["verdict"] != "HEALTHY" and w["health"].get("check") == "link_matrix"),
            "flagged_links": sorted(f"{x['a']}-{x['b']}" for x in links if x.get("flagged")),
            "min_ratio": round(min(x["ratio"] for x in links), 3),
            "median_cross_host_gbps": round(job["link_matrix"]["median_cross_host_gbps"], 3),
            "warm_start": job.get("warm_start", False)}
