"""Sweeps that stay steady and cover every kind, on 8 namespace hosts of one CPU worker each
(fleetbed.py), the coordinator sweeping every SWEEP_S (`--check-every`):

- h5's cable held at a constant 3 Gbit/s (a real tc token bucket) for RINGLEADER_SWEEPS_LIMITED_S
  (default 120; bench/fleet_steady.py: 600) of sweeps: h5 is named and keeps that one verdict (no
  release and quarantine again), and no other worker is ever failed;
- a user job every 15 s for RINGLEADER_SWEEPS_TRAFFIC_S (default 120; the bench: 1200) beside the
  sweeps: every kind runs on every worker at least once (the sweep plan says so: SweepPlan), and
  no user job waits longer than the longest check job that held its workers (plus 2 s).

RINGLEADER_SWEEPS_REPORT, a path, gets every figure as JSON.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from fleetbed import SLOW_HOST, SLOW_WORKER, WORKERS, rate_limit
from hostcluster import bed_cluster
from ringleader import checks
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.multihost

SWEEP_S = 20
LIMITED_S = float(os.environ.get("RINGLEADER_SWEEPS_LIMITED_S", "120"))
TRAFFIC_S = float(os.environ.get("RINGLEADER_SWEEPS_TRAFFIC_S", "120"))
USER_EVERY_S = 15
REPORT: dict = {"limited": {}, "traffic": {}}


@pytest.fixture(scope="module")
def sweeping(tmp_path_factory):
    with bed_cluster(tmp_path_factory.mktemp("sweeps"), "open", WORKERS,
                     coordinator_extra=["--check-every", str(SWEEP_S)]) as (bed, c):
        yield bed, c
    if os.environ.get("RINGLEADER_SWEEPS_REPORT"):
        with open(os.environ["RINGLEADER_SWEEPS_REPORT"], "w") as f:
            json.dump(REPORT, f, indent=2)


def _verdicts(c) -> dict[str, tuple[int, bool]]:
    """Each worker's verdict and whether it is kept out of user jobs (its state says QUARANTINED
    only while idle: a worker in a sweep's check reads BUSY)."""
    return {w.worker_id: (w.health.verdict, (w.health.verdict == pb.UNHEALTHY and not w.health.breaker_held
                                             and not w.health.observe_only) or w.health.cordoned)
            for w in c.client.workers()}


@pytest.mark.timeout(7200)
def test_a_constant_3gbit_host_keeps_one_verdict_through_the_sweeps(sweeping):
    bed, c = sweeping
    changes: list[tuple[float, str, str, bool]] = []  # (seconds in, worker, verdict, quarantined)
    last: dict[str, tuple[int, bool]] = {}
    sweeps_before = c.client.sweep_plan().sweeps
    rate_limit(bed, SLOW_HOST, on=True, rate="3gbit")
    t0 = time.monotonic()
    try:
        while (now := time.monotonic() - t0) < LIMITED_S:
            for wid, seen in _verdicts(c).items():
                if last.get(wid) != seen:
                    last[wid] = seen
                    changes.append((round(now, 1), wid, pb.Verdict.Name(seen[0]), seen[1]))
            time.sleep(1.0)
    finally:
        rate_limit(bed, SLOW_HOST, on=False, rate="3gbit")
    mine = [x for x in changes if x[1] == SLOW_WORKER]
    failed_at = next((i for i, x in enumerate(mine) if x[2] == "UNHEALTHY"), None)
    REPORT["limited"] = {"seconds": LIMITED_S, "sweeps": c.client.sweep_plan().sweeps - sweeps_before,
                         "changes": changes, "named_after_s": mine[failed_at][0] if failed_at is not None else None}
    assert failed_at is not None, REPORT["limited"]
    # One verdict from then on: never healthy or out of quarantine again while the limit held.
    assert all(x[2] == "UNHEALTHY" and x[3] for x in mine[failed_at + 1:]), REPORT["limited"]
    assert not any(x[2] == "UNHEALTHY" for x in changes if x[1] != SLOW_WORKER), REPORT["limited"]


@pytest.mark.timeout(7200)
def test_sweeps_beside_user_traffic_cover_every_kind_and_jobs_wait_one_check_at_most(sweeping):
    bed, c = sweeping
    # Back to clean after the limit: put h5 back (its recheck passes on a clean cable).
    c.client.cordon(SLOW_WORKER, on=False, force=True)
    plan_before = c.client.sweep_plan()
    ids = sorted(WORKERS)
    jobs, t0, n = [], time.monotonic(), 0
    while time.monotonic() - t0 < TRAFFIC_S:
        pair = [ids[n % len(ids)], ids[(n + 3) % len(ids)]]
        jobs.append(c.submit(world_size=2, workers=pair, op="all_reduce", sizes=[1 << 16], iters=5).id)
        n += 1
        time.sleep(USER_EVERY_S)
    ended = [c.wait_job(j, timeout=300) for j in jobs]
    assert all(j.state == pb.SUCCEEDED for j in ended), [(j.id, j.reason) for j in ended if j.state != pb.SUCCEEDED]
    plan = c.client.sweep_plan()
    since = min(j.created_at for j in ended)
    check_jobs = [j for kind in checks.KINDS for j in c.client.list(op=kind, limit=500).jobs
                  if j.created_at >= since and j.started_at and j.finished_at]
    longest_check = max((j.finished_at - j.started_at for j in check_jobs), default=0.0)
    waits = sorted(j.started_at - j.created_at for j in ended)
    REPORT["traffic"] = {
        "seconds": TRAFFIC_S, "user_jobs": len(ended), "sweeps": plan.sweeps - plan_before.sweeps,
        "check_jobs": len(check_jobs), "longest_check_s": round(longest_check, 2),
        "user_wait_s": {"median": round(waits[len(waits) // 2], 3), "max": round(waits[-1], 3)},
        "plan": [{"kind": k.kind, "stale_s": round(k.stale_s, 1), "never_checked": k.never_checked, "skips": k.skips}
                 for k in plan.kinds]}
    # Every kind ran on every connected worker within the traffic's time (stale_s: on its stalest one).
    assert all(0 <= k.stale_s < TRAFFIC_S for k in plan.kinds), REPORT["traffic"]
    assert waits[-1] <= longest_check + 2.0, REPORT["traffic"]
