"""The cyclic collector on a clock as well as on CPython's count.

CPython starts a young pass when allocations net of deallocations pass the young threshold, and a
middle pass every `threshold[1]` young passes. While a fleet drains its queue, most objects that
die are old ones (the queued jobs and their records), and CPython counts their deallocations
against the young generation's allocations: the count stays low while the young generation grows.
Measured on the development VM, 2,000 workers draining 8,000 jobs: a count under 2,000 beside a
young generation of 110,000 objects. The pass that comes at last walks all of it, and the middle
pass all that survived: 107-168 ms on the device hosts with 5,000 workers, one of them freeing
52,000 objects at once, and that was the tail of users' calls.

`CollectorPacer` runs from a thread of its own: when no pass has run for `every_s`, it runs the
pass CPython would run now (the middle one once enough young passes have come, else the young
one). So the young generation holds at most what one interval allocates, and the middle one what
`threshold[1]` intervals left alive. A pass holds the GIL wherever it starts, so running one
from this thread costs the loop what an automatic one would.

The pacer runs no full pass, and CPython starts one only from an automatic pass, which the
pacer's passes keep from coming (on the VM: none after start-up in any paced run). That
is on purpose for now: the oldest generation holds the queued jobs (about ten tracked objects
each), and a full pass at 9,000-12,000 queued took 100-181 ms of CPU there. The garbage it leaves
is small: 0-5 objects per 40 s reached the oldest generation in a churn run
(docs/decisions/collector-pacer.md).

Only in a process that does not hold the workers' streams: each stream's pending read is made anew
per message, so a pass on a clock walks all of them, whatever else was allocated (a pass
every 2 s took 96-117 ms at 10,000 workers, and p99 rose from 34.8 to 297.6 ms:
docs/decisions/collector-pacer.md). So the coordinator paces its passes when its relay process
(coordinator/edge/relay.py) serves the streams, and the relay does not.
"""

from __future__ import annotations

import gc
import threading
import time

GC_YOUNG = 20_000  # allocations between young collections (CPython's default: 700)
PACE_S = 0.25  # the longest time without a pass while the process allocates
# Middle passes before CPython starts a full one by itself: never. A full pass walks every object
# the process holds (tune_collector says why that is a stall, and what is left uncollected).
FULL_NEVER = 1 << 30


def tune_collector(pace_s: float = PACE_S, full_passes: bool = False) -> CollectorPacer | None:
    """For a long-lived server process, once it is started: what it holds now (modules, the app,
    the servers) lives as long as the process, so it leaves the collector's passes (gc.freeze);
    young passes come less often by count, and on a clock too (pace_s <= 0: not). On two busy cores
    with 2,000 workers, full passes held the event loop for 100-650 ms before the freeze
    (bench/control_plane.py).

    CPython starts no full pass by itself either (FULL_NEVER), unless `full_passes` (the worker
    relay: its passes hold no user's call, and the cycles of its ended streams need one). With the
    pacer, its passes already kept CPython's own from coming; without it (the default coordinator,
    whose process also holds the workers' streams) CPython starts one whenever the objects promoted
    since its last full pass outnumber a quarter of those that pass kept. Such a pass walks the
    whole fleet, the queue and every stream while it holds every thread, users' calls included:
    380,000 objects, 270-320 ms of CPU, with 3,000 simulated workers held (development VM). It is
    the likeliest cause of the default coordinator's stalls under churn, which the relay path never
    had (5,000 workers draining 10,000 jobs: 1.5 s, twice a run, 2 x H200 host; not confirmed
    there, as the stall watch then missed stalls that ended in another thread). The price is the
    cyclic garbage that reaches the oldest generation, which only a full pass frees: 0-5 objects
    per 40 s of churn with the relay (docs/decisions/collector-pacer.md); without it, also the
    cycles of the workers' streams that end, not measured yet."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG, gc.get_threshold()[1], gc.get_threshold()[2] if full_passes else FULL_NEVER)
    if pace_s <= 0:
        return None
    pacer = CollectorPacer(pace_s)
    pacer.start()
    return pacer


class CollectorPacer:
    def __init__(self, every_s: float = PACE_S) -> None:
        if every_s <= 0:
            raise ValueError(f"every_s must be > 0, got {every_s}")
        self.every_s = every_s
        self.last = time.monotonic()  # the end of the latest pass, whoever ran it
        self.passes = [0, 0]  # passes this pacer ran: young, middle
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gc-pacer", daemon=True)

    def start(self) -> None:
        gc.callbacks.append(self._seen)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._seen in gc.callbacks:
            gc.callbacks.remove(self._seen)
        if self._thread.is_alive():
            self._thread.join(1.0)

    def _seen(self, phase: str, info: dict) -> None:
        if phase == "stop":
            self.last = time.monotonic()

    def _run(self) -> None:
        while not self._stop.wait(max(0.0, self.last + self.every_s - time.monotonic())):
            if time.monotonic() - self.last >= self.every_s:
                self.collect_due()

    def collect_due(self) -> int:
        """The pass CPython's count would pick next, short of a full one: the middle generation
        when young passes since its last pass exceed its threshold, else the young one."""
        generation = 1 if gc.get_count()[1] > gc.get_threshold()[1] else 0
        self.passes[generation] += 1
        gc.collect(generation)
        self.last = time.monotonic()  # also when another pass was running (collect did nothing)
        return generation
