"""The sweep's ledger (coordinator/health/sweeper.py SweepLedger): kinds taken stalest first, so a
kind that light user traffic keeps skipping goes first next time and is never starved; and a
recheck round with nothing to run waits for nothing (no 'Set of Tasks/Futures is empty')."""

from __future__ import annotations

import asyncio

from coordinator.edge.fleet_metrics import sweep_families
from coordinator.health.sweeper import SweepLedger, wait_all
from ringleader import checks

WORKERS = [f"w{i}" for i in range(8)]


def test_a_kind_skipped_for_want_of_idle_workers_goes_first_next_sweep():
    # Beside a user job every 15 s only the first turn of each sweep finds the workers idle (as
    # measured: 14 link checks, 1 GPU check, 0 corruption checks in 22 minutes with a fixed order).
    ledger, now, runs = SweepLedger(), 0.0, {k: 0 for k in checks.KINDS}
    for _ in range(6):
        left = list(checks.KINDS)
        for turn in range(len(left)):
            kind = ledger.order(left, WORKERS, now)[0]
            left.remove(kind)
            if turn == 0:
                ledger.ran(kind, WORKERS, now)
                runs[kind] += 1
            else:
                ledger.skip(kind, "0 idle worker(s) at its turn")
            now += 10.0
        now += 60.0
    assert all(n == 2 for n in runs.values()), runs  # each kind in turn, none starved
    assert sum(ledger.skips.values()) == 6 * (len(checks.KINDS) - 1)


def test_the_plan_names_the_stalest_kind_first_and_why_the_last_sweep_skipped_a_kind():
    ledger = SweepLedger()
    ledger.ran("link_matrix", WORKERS, 100.0)
    ledger.ran("gpu_check", WORKERS, 50.0)
    ledger.ran("sdc_check", WORKERS[:4], 120.0)  # half the workers never had it: stalest
    ledger.skip("gpu_check", "0 idle worker(s) at its turn")
    plan = ledger.plan(["link_matrix", "gpu_check", "sdc_check"], WORKERS, 130.0)
    assert [k for k, _, _ in plan] == ["sdc_check", "gpu_check", "link_matrix"]
    assert plan[1] == ("gpu_check", 80.0, "0 idle worker(s) at its turn")
    families = {f.name: f for f in sweep_families(ledger)}
    assert {s.labels["kind"]: s.value for s in families["ringleader_sweep_skips"].samples
            if s.name.endswith("_total")}["gpu_check"] == 1
    assert sweep_families(None) == []


def test_waiting_for_no_job_returns_at_once():
    assert asyncio.run(asyncio.wait_for(wait_all(None, [], 5.0), 1.0)) == []
