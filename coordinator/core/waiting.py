"""Why a queued job waits, in words (the scheduler's `reason`, worked out when read).

    needs 8 workers, 6 connected                  too few eligible workers connected at all
    needs 8 workers of one backend, 4 gloo, 4 nccl connected
    needs 3 workers with equal NCCL settings and versions, 3 gloo connected: 2 alike; w2 differs
    (NCCL_PROTO=LL vs unset)                      a gang never mixes them (health/fingerprints.py)
    needs 8 workers, 3 idle                       enough connected; the others are busy
    needs 8 workers: next placement pass (...)    the last pass stopped at its ranks before it
    needs 6 workers: 6 connected, 4 idle, 0 busy, 1 quarantined, 1 cordoned
                                                  when quarantined or cordoned workers are among
                                                  the eligible ones, every count apart, so a
                                                  reader sees that the fleet is there and what
                                                  keeps the job back (a failed check, or an
                                                  operator's cordon)

A quarantined or cordoned worker (coordinator/health/book.py) counts as connected, never as idle
or busy: it takes no user job unless the job names it.
"""

from __future__ import annotations

from typing import Callable, Iterable

from collections import Counter

from coordinator.core.sched_index import FleetIndex
from coordinator.health.fingerprints import gang_difference
from ringleader.fleet_fit import held_back


def reason(fleet: FleetIndex, need, connected: dict[str, int], seen_idle: int | None,
           cordoned_ids: Callable[[], Iterable[str]] = list) -> str:
    """`connected`: eligible, not quarantined, connected workers per lane; `seen_idle`: the
    eligible idle workers the job saw (and reserved) in the last pass, None when that pass
    stopped at its ranks before reaching the job; `cordoned_ids()`: the
    workers an operator cordoned (the others held back failed a check), asked only when some
    eligible worker is held back."""
    n, where = need.world_size, need.constraints()
    counts = {b: k for b, k in connected.items() if k}
    held = quarantined(fleet, need)
    if held:
        usable = sum(counts.values())
        idle = idle_now(fleet, need)
        by_hand = sum(1 for wid in cordoned_ids() if (w := fleet.views.get(wid)) is not None and w.kind[4]
                      and _fits_unless_quarantined(need, w.kind) and (not need.host or w.host == need.host))
        return held_back(n, usable, idle, held - by_hand, by_hand, where)
    if not any(k >= n for k in counts.values()):
        backends: Counter[str] = Counter()
        for (b, _), k in counts.items():
            backends[b] += k
        if split := next((b for b, k in backends.items() if k >= n), None):
            return _mismatch(fleet, need, {lane: k for lane, k in counts.items() if lane[0] == split}, where)
        if len(backends) > 1:  # enough in all, but a gang never mixes backends
            listed = ", ".join(f"{k} {b}" for b, k in backends.items())
            return f"needs {n} workers of one backend, {listed} connected{where}"
        return f"needs {n} workers, {sum(counts.values())} connected{where}"
    if seen_idle is None:
        return f"needs {n} workers{where}: next placement pass (a pass starts at most --pass-ranks ranks)"
    return f"needs {n} workers, {seen_idle} idle{where}"


def _mismatch(fleet: FleetIndex, need, lanes: dict[tuple[str, str], int], where: str) -> str:
    """Enough workers of one backend, but no configuration lane holds the gang: the biggest lane
    is the yardstick, the workers of the others are named with what differs (a few of each)."""
    (backend, base), most = max(lanes.items(), key=lambda kv: kv[1])
    named: dict[str, list[str]] = {}
    for w in fleet.views.values():  # read only when a job waits for this reason
        if w.backend == backend and w.config != base and (w.backend, w.config) in lanes and need.admits(w):
            ids = named.setdefault(w.config, [])
            if len(ids) < 3:
                ids.append(w.worker_id)
    odd = "; ".join(f"{', '.join(ids)}{'...' if lanes[(backend, cfg)] > len(ids) else ''} "
                    f"differ{'s' if lanes[(backend, cfg)] == 1 else ''} ({gang_difference(cfg, base)})"
                    for cfg, ids in sorted(named.items()))
    return (f"needs {need.world_size} workers with equal NCCL settings and versions, {sum(lanes.values())} "
            f"{backend} connected{where}: {most} alike; {odd}")


def _fits_unless_quarantined(need, kind) -> bool:
    return kind[4] and need.fits(kind[:4] + (False,) + kind[5:])


def quarantined(fleet: FleetIndex, need) -> int:
    """Connected workers the job could use but for their quarantine (a job naming them may)."""
    if need.worker_ids:
        return 0  # it may use the quarantined workers it names
    return sum((by_host.get(need.host, 0) if need.host else fleet.totals[kind])
               for kind, by_host in fleet.hosts.items() if _fits_unless_quarantined(need, kind))


def idle_now(fleet: FleetIndex, need) -> int:
    """Eligible idle workers, quarantined ones apart."""
    return sum(len(by_host.get(need.host, ())) if need.host else fleet.idle_n.get(kind, 0)
               for kind, by_host in fleet.idle.items() if not kind[4] and need.fits(kind))
