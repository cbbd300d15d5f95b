"""The link matrix finds a slow host: 8 hosts made of network namespaces (netbed.py), one CPU
worker each (gloo), the coordinator on h0. One host's cable is rate-limited with a real tc token
bucket (tbf, 200 Mbit/s, on its eth0: what leaves the host) and `ringleader check` must name
that host and no other; clean runs before it must name nobody (no false verdict). How long a
check takes is measured, not asserted (bench/fleet_checks.py; the goal is 10 s).

A 2x slower link: both ends of the host's cable limited to half the median cross-host
throughput of a clean check just before; the run counts when each of the host's links read at
most 0.6 of the run's median (else the bed drifted: measured again), and then the host must be
named alone, every run.

RINGLEADER_FLEET_CLEAN_RUNS (default 2) sets the clean link-matrix runs, RINGLEADER_FLEET_DEFAULT_RUNS
(default 1) the clean runs of the default `check` (every kind), RINGLEADER_FLEET_HALF_RUNS (default 1)
the runs at half rate, RINGLEADER_FLEET_RATE (default 200mbit) the slow host's rate; RINGLEADER_FLEET_REPORT, a path, gets every run's figures as JSON
(bench/fleet_checks.py runs this test with 20 / 20 / 5 and keeps that).
"""

from __future__ import annotations

import json
import os

import pytest

from fleetbed import SLOW_HOST, SLOW_WORKER, WORKERS, _figures, check, rate_limit
from hostcluster import bed_cluster
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.multihost

RATE = os.environ.get("RINGLEADER_FLEET_RATE", "200mbit")  # the slow host's rate (tc tbf syntax)
# A 2x slower link: each of the slow host's links at most this share of the run's median (a
# little over a half: the rate is set from a clean check just before, and the bed drifts).
HALF_SCENARIO = 0.6
SCENARIO_TRIES = 3
REPORT: dict = {"hosts": len(WORKERS), "rate": RATE, "clean": [], "slow": [], "default_clean": [], "half": []}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with bed_cluster(tmp_path_factory.mktemp("fleet"), "open", WORKERS) as (bed, c):
        yield bed, c
    if os.environ.get("RINGLEADER_FLEET_REPORT"):
        with open(os.environ["RINGLEADER_FLEET_REPORT"], "w") as f:
            json.dump(REPORT, f, indent=2)


@pytest.mark.timeout(3600)  # RINGLEADER_FLEET_CLEAN_RUNS runs of seconds each
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
    rate_limit(bed, SLOW_HOST, on=True, rate=RATE)
    try:
        answer, took, code = check(c)
    finally:
        rate_limit(bed, SLOW_HOST, on=False, rate=RATE)
    figures = _figures(answer, took)
    REPORT["slow"].append(figures)
    assert figures["named_hosts"] == [SLOW_HOST] and figures["not_healthy"] == [SLOW_WORKER], str(figures)
    assert code == 1  # a checked worker failed
    rank = next(w["rank"] for w in answer["jobs"][0]["workers"] if w["worker_id"] == SLOW_WORKER)
    slow_links = [x for x in answer["jobs"][0]["link_matrix"]["links"] if rank in (x.get("a", 0), x.get("b", 0))]
    assert len(slow_links) == 7 and all(x.get("flagged") for x in slow_links)
    health = {w.worker_id: w.health for w in c.client.workers()}
    assert health[SLOW_WORKER].verdict == pb.UNHEALTHY and "7 of 7" in health[SLOW_WORKER].figure


@pytest.mark.timeout(3600)
def test_default_check_names_nobody(fleet):
    bed, c = fleet
    for _ in range(int(os.environ.get("RINGLEADER_FLEET_DEFAULT_RUNS", "1"))):
        answer, took, code = check(c, "link_matrix,gpu_check,sdc_check")
        REPORT["default_clean"].append(figures := _figures(answer, took))
        assert all(j["state"] == "SUCCEEDED" for j in answer["jobs"]), [j["reason"] for j in answer["jobs"]]
        assert figures["not_healthy"] == [] and code == 0, str(figures)


@pytest.mark.timeout(3600)
def test_a_2x_slower_link_is_named_and_no_other(fleet):
    bed, c = fleet
    for _ in range(int(os.environ.get("RINGLEADER_FLEET_HALF_RUNS", "1"))):
        for attempt in range(SCENARIO_TRIES):
            # The rate from a clean check right before: the bed's clean median moves 2x between
            # runs (1.7-4.3 GB/s on the 2-core machine, fastest in a fresh bed's first checks), so
            # half of an earlier median may not be half of this run's. A clean run names nobody.
            clean, took, code = check(c)
            REPORT["clean"].append(figures := _figures(clean, took))
            # (A verdict of another kind may stand from the default check before: not this one's.)
            assert figures["named_hosts"] == [] and figures["link_not_healthy"] == [], str(figures)
            rate = f"{int(figures['median_cross_host_gbps'] * 8e3 / 2)}mbit"  # GB/s -> Mbit/s, halved
            # Both directions: a ping-pong limited one way only is 1.5x slower, not 2x.
            rate_limit(bed, SLOW_HOST, on=True, rate=rate, both=True)
            try:
                answer, took, code = check(c)
            finally:
                rate_limit(bed, SLOW_HOST, on=False, both=True)
            job = next(j for j in answer["jobs"] if "link_matrix" in j)
            rank_of = {w["worker_id"]: w["rank"] for w in job["workers"]}
            slowest_is = max(x["ratio"] for x in job["link_matrix"]["links"] if rank_of[SLOW_WORKER] in (x.get("a", 0), x.get("b", 0)))
            REPORT["half"].append(figures := {**_figures(answer, took), "rate": rate, "attempt": attempt,
                                              "slow_host_best_ratio": round(slowest_is, 3)})
            assert set(figures["named_hosts"]) <= {SLOW_HOST}, str(figures)  # a wrong name, never
            assert set(figures["link_not_healthy"]) <= {SLOW_WORKER}, str(figures)
            # The scenario: every link of the host read at most HALF_SCENARIO of the run's median.
            # If the bed ran slower than its clean check said, the limit did not make the host 2x
            # slower, and this run says nothing about the check: measure the bed again.
            if slowest_is <= HALF_SCENARIO:
                break
        assert slowest_is <= HALF_SCENARIO, f"no 2x slower link in {SCENARIO_TRIES} tries: {REPORT['half'][-SCENARIO_TRIES:]}"
        assert figures["named_hosts"] == [SLOW_HOST] and figures["link_not_healthy"] == [SLOW_WORKER], str(figures)
        assert code == 1
