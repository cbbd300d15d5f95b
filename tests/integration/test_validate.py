"""The validation gate and the remediation hooks end to end: a real coordinator (with --webhook to
a real HTTP receiver on 127.0.0.1) and 4 CPU workers (gloo), one started with the fault injector's
slowed compute. `ringleader validate` on all 4 exits non-zero naming the slow one; on the 3 clean
ones it exits 0; the slow worker's quarantine reached the webhook as a CloudEvent telling it to
drain, and `ringleader hooks log` shows the delivery."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest

from cluster import Cluster, ringleader_cmd
from webhook_receiver import Receiver

pytestmark = pytest.mark.integration

# Four: the slow one among three clean peers, as many as the link check needs to name one worker
# by its links; each more worker is another daemon importing torch and a longer check on 2 cores.
IDS = [f"v{i}" for i in range(4)]
SLOW = "v2"
FAULTY = {"RINGLEADER_FAULTS": "slow_compute=8", "RINGLEADER_FAULTS_ALLOWED": "tests"}


@pytest.fixture(scope="module")
def receiver():
    r = Receiver(fail_first=2)
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, receiver):
    c = Cluster(tmp_path_factory.mktemp("validate"))
    try:
        # Every failed worker quarantined, whatever the circuit breaker's share.
        c.start_coordinator(http=True, extra=["--quarantine-max-share", "1", "--webhook", receiver.url])
        for wid in IDS:
            c.start_worker(wid, env=FAULTY if wid == SLOW else None)
        c.wait_idle(IDS)
        yield c
    finally:
        c.close()


def validate(fleet, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    out = subprocess.run(ringleader_cmd("--coordinator", fleet.address, "validate", *args),
                         capture_output=True, text=True, timeout=400)
    return out, time.monotonic() - started


def test_validate_names_the_slow_worker_and_passes_the_clean_ones(fleet, receiver):
    load = os.getloadavg()
    out, took = validate(fleet, "--workers", ",".join(IDS))
    print(f"validate on 4 CPU workers: exit {out.returncode} in {took:.1f} s (load before {load}, "
          f"after {os.getloadavg()})", file=sys.stderr)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"FAILED: {SLOW}" in out.stdout, out.stdout
    assert "gpu_check" in out.stdout and "link_matrix" in out.stdout and "sdc_check" in out.stdout
    for line in out.stdout.splitlines():  # the slow worker's gpu_check line: its figure and yardstick
        if line.split()[:3] == [SLOW, "gpu_check", "UNHEALTHY"]:
            assert "TFLOP/s" in line or "GB/s" in line, line
            break
    else:
        raise AssertionError(out.stdout)

    clean = [w for w in IDS if w != SLOW]
    out, took = validate(fleet, "--workers", ",".join(clean), "-o", "json")
    print(f"validate on 3 clean CPU workers: exit {out.returncode} in {took:.1f} s (load {os.getloadavg()})",
          file=sys.stderr)
    cert = json.loads(out.stdout)
    assert out.returncode == 0 and cert["passed"] and cert["failed"] == [], out.stdout
    assert sorted(j["check"] for j in cert["checks"]) == ["gpu_check", "link_matrix", "sdc_check"]
    assert all(len(w["figures"]) == 3 and all(f["expected"] for f in w["figures"]) for w in cert["workers"])

    # The quarantine reached the webhook (which failed its first two deliveries) once, to drain.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(e["data"]["worker_id"] == SLOW for e in receiver.events):
        time.sleep(0.1)
    slow = [e for e in receiver.events if e["data"]["worker_id"] == SLOW and e["data"]["verdict"] == "UNHEALTHY"]
    assert len(slow) == 1 and slow[0]["data"]["action"] == "drain", receiver.events
    assert len({e["id"] for e in receiver.events}) == len(receiver.events)  # none twice
    log = subprocess.run(ringleader_cmd("--coordinator", fleet.address, "hooks", "log", "-o", "json"),
                         capture_output=True, text=True, timeout=60)
    assert log.returncode == 0, log.stderr
    rows = json.loads(log.stdout)["deliveries"]
    assert any(d["event_id"] == slow[0]["id"] and d["state"] == "DELIVERED" for d in rows), rows
    r = httpx.get(f"{fleet.http_url}/api/v1/hooks/log", timeout=30)
    assert r.status_code == 200 and {d["event_id"] for d in r.json()["deliveries"]} == {d["event_id"] for d in rows}


def test_validate_refuses_a_bad_selection_naming_the_field(fleet):
    out, _ = validate(fleet)
    assert out.returncode == 2 and "--host" in out.stderr
    out, _ = validate(fleet, "--workers", "nobody")
    assert out.returncode != 0 and "worker" in out.stderr
