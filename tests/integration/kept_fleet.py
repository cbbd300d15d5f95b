"""Workers started the way the README tells operators to (each with --state-dir, so a restarted
daemon keeps its id), and a fleet put back whole before each test: the GPU suites' harness
(tests/gpu/conftest.py, tests/gpu/fleet.py) and its CPU twin (tests/integration/test_worker_restart.py).

`restore` cancels what a failed test left running, restarts any daemon that died or was killed
(under its old id, with its old state dir), puts a quarantined one back in service and waits for the whole fleet to be idle; if it cannot
within its timeout it fails at once, naming the workers, so one test's failure never hangs the next.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ringleader.states import TERMINAL
from ringleader.v1 import jobs_pb2 as pb


@dataclass
class KeptWorker:
    worker_id: str
    device: str = "cpu"
    env: dict = field(default_factory=dict)


def state_dir(c) -> str:
    return str(c.tmp / "worker-state")  # one folder for the fleet: one file per worker id


def start_kept(c, w: KeptWorker):
    """Start `w` as an operator would: its credential under --state-dir."""
    return c.start_worker(w.worker_id, device=w.device, env=w.env or None, extra=["--state-dir", state_dir(c)])


def start_kept_fleet(c, fleet: list[KeptWorker], timeout: float = 300) -> list[str]:
    for w in fleet:
        start_kept(c, w)
    ids = [w.worker_id for w in fleet]
    c.wait_idle(ids, timeout=timeout)
    return ids


def cancel_unfinished(c) -> list[str]:
    """Cancel every job a test left queued or running; returns their ids."""
    left = [j.id for j in c.client.list(limit=200).jobs if j.state not in TERMINAL]
    for job_id in left:
        try:
            c.client.cancel(job_id, "the test that submitted it ended")
        except Exception:  # noqa: BLE001 - it may have finished meanwhile
            pass
    return left


def restore(c, fleet: list[KeptWorker], timeout: float = 120) -> list[str]:
    """Put the fleet back whole before a test; returns the ids restarted. Fails (AssertionError
    naming the workers and the logs' folder) if it is not idle within `timeout`."""
    cancel_unfinished(c)
    restarted = []
    for w in fleet:
        p = c.workers.get(w.worker_id)
        if p is None or p.poll() is not None:
            c.workers.pop(w.worker_id, None)
            start_kept(c, w)
            restarted.append(w.worker_id)
    ids = {w.worker_id for w in fleet}
    for info in c.client.workers():  # a check that failed one leaves it quarantined: back in service
        if info.worker_id in ids and (info.health.cordoned or info.health.verdict == pb.UNHEALTHY):
            c.client.cordon(info.worker_id, on=False)
    deadline = time.monotonic() + timeout
    while True:
        states = {x.worker_id: x.state for x in c.client.workers()}
        if all(states.get(i) == pb.IDLE for i in ids):
            return restarted
        if time.monotonic() > deadline:
            raise AssertionError(f"the fleet is not whole after {timeout} s (restarted {restarted}): "
                                 + ", ".join(f"{i} {pb.WorkerState.Name(states[i]) if i in states else 'absent'}"
                                             for i in sorted(ids)) + f"; logs in {c.tmp}")
        time.sleep(0.2)
