"""The health sweeps' plan (SweepPlan): the same answer over gRPC, REST and `ringleader check
--plan`, following what the sweeps really ran, on a real coordinator sweeping 3 CPU workers."""

from __future__ import annotations

import json
import subprocess
import time

import httpx
import pytest

from cluster import Cluster, ringleader_cmd
from ringleader import checks
from ringleader.v1 import jobs_pb2 as pb

pytestmark = pytest.mark.integration

IDS = ["s0", "s1", "s2"]


@pytest.fixture(scope="module")
def sweeping(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("plan"))
    try:
        c.start_coordinator(http=True, extra=["--check-every", "1"])
        before = c.client.sweep_plan()  # nothing has run yet: every kind is "never"
        for wid in IDS:
            c.start_worker(wid)
        c.wait_idle(IDS)
        yield c, before
    finally:
        c.close()


def test_the_plan_follows_the_sweeps_on_every_door(sweeping):
    c, before = sweeping
    # Before any worker: a sweep may have come (each second) and skipped every kind, none ran.
    assert before.check_every_s == 1 and before.workers == 0
    assert all(k.skips == before.sweeps and k.never_checked == 0 for k in before.kinds), before
    assert sorted(k.kind for k in before.kinds) == sorted(checks.KINDS)
    deadline = time.monotonic() + 120
    # Sweeps while the workers joined found too few idle for some kinds: each kind then goes
    # first until it has run on every worker.
    plan = c.client.sweep_plan()
    while any(k.never_checked for k in plan.kinds) and time.monotonic() < deadline:
        time.sleep(0.5)
        plan = c.client.sweep_plan()
    assert plan.sweeps >= 1 and plan.workers == 3, plan
    assert all(k.never_checked == 0 and 0 <= k.stale_s < 120 for k in plan.kinds), plan
    # The order is the next sweep's: the kind that ran longest ago first.
    assert [k.stale_s for k in plan.kinds] == sorted((k.stale_s for k in plan.kinds), reverse=True)

    rest = httpx.get(f"{c.http_url}/api/v1/checks/plan", timeout=30)
    assert rest.status_code == 200, rest.text
    assert sorted(k["kind"] for k in rest.json()["kinds"]) == sorted(checks.KINDS)
    assert rest.json()["workers"] == 3 and rest.json()["sweeps"] >= 1
    out = subprocess.run(ringleader_cmd("--coordinator", c.address, "check", "--plan", "-o", "json"),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert sorted(k["kind"] for k in json.loads(out.stdout)["kinds"]) == sorted(checks.KINDS)
    text = subprocess.run(ringleader_cmd("--coordinator", c.address, "check", "--plan"),
                          capture_output=True, text=True, timeout=60)
    assert text.returncode == 0 and "sweeps every 1 s" in text.stdout and "3 connected workers" in text.stdout
    bad = subprocess.run(ringleader_cmd("--coordinator", c.address, "check", "--plan", "--kind", "gpu_check"),
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "plan" in bad.stderr


def test_a_kind_with_no_idle_worker_at_its_turn_is_said_skipped(sweeping):
    c, _ = sweeping
    # A long user job on every worker: the next sweeps find nobody idle and say so per kind.
    job = c.submit(world_size=3, workers=IDS, op="all_reduce", sizes=[1 << 20], iters=100000)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            plan = c.client.sweep_plan()
            if all(k.skipped for k in plan.kinds):
                break
            time.sleep(0.5)
        assert all("idle worker" in k.skipped and k.skips >= 1 for k in plan.kinds), plan
    finally:
        c.client.cancel(job.id)
