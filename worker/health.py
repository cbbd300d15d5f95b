"""Liveness and readiness of a worker process, for Kubernetes probes (/healthz, /readyz).

The worker's metrics server (worker/metrics.py) answers both from its own thread, so a daemon
whose asyncio loop is stuck still gets an answer, and the answer says so:

- live: every daemon's loop stamped `loop_alive_at` (time.monotonic) within LOOP_STALL_S. A
  blocked loop (a synchronous call that never returns, a deadlock) stops stamping; a restart of
  the pod is the only cure. Losing the coordinator is not a liveness failure: the loop keeps
  running while it reconnects, and restarting would not bring the coordinator back.
- ready: every daemon is registered with the coordinator, so the coordinator sees it IDLE or
  BUSY. A rolling update of the worker DaemonSet waits for this before it moves on to the next
  node, so at most one node's GPUs are out of the fleet at a time.

Each check returns (ok, reason): one line, for the probe's body and `kubectl describe pod`.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

# The daemons stamp once a second; allow for a long garbage collection or a slow executor start.
LOOP_STALL_S = 20.0


def liveness(daemons: Sequence, clock: Callable[[], float] = time.monotonic) -> tuple[bool, str]:
    now = clock()
    for d in daemons:
        stalled = now - d.loop_alive_at
        if stalled > LOOP_STALL_S:
            return False, f"{d.config.device}: event loop has not run for {stalled:.0f} s"
    return True, f"alive ({len(daemons)} daemon{'s' if len(daemons) != 1 else ''})"


def readiness(daemons: Sequence) -> tuple[bool, str]:
    if not daemons:
        return False, "no worker daemon started yet"
    states = []
    for d in daemons:
        device = d.config.device
        if not d.device:
            return False, f"{device}: executor starting"
        if not d.connected.is_set():
            return False, f"{device}: not registered with the coordinator {d.config.coordinator}"
        states.append(f"{device} {'BUSY' if d.job else 'IDLE'}")
    return True, "ready: " + ", ".join(states)
