"""Who stalled the coordinator's event loop (a 10,000-worker fleet showed one stall of 0.3-0.5 s a
run, and nothing said what it was).

A thread watches the loop's lag sampler (coordinator/core/load.py's LagMeter). While the sampler
is overdue by `threshold_s` or more, the thread samples the loop thread's stack; garbage
collection passes are timed as they happen (gc.callbacks: a pass holds the GIL, so no stack is
sampled during one). Once the loop runs again, one warning names the stall's length, the
collection passes inside it and the stack seen most, and `stalls` counts it (a metric).
Costs nothing the loop sees: the thread wakes every `period_s`, a GC callback is two clock reads.

A stall the thread never saw while it lasted is reported too, from the lag the loop's own sample
measured once it ran again: a collection pass holds this thread as well, and when the pass ends
in another thread (the gRPC edge's), the loop may take the GIL first, take its overdue sample and
leave nothing late to see (a full pass of 0.46 s, over 3,000,000 objects in another thread, went
unreported so in one of three tries on the development VM).
"""

from __future__ import annotations

import collections
import gc
import logging
import sys
import threading
import time
import traceback
from typing import NamedTuple

from coordinator.core.load import LagMeter

log = logging.getLogger("ringleader.coordinator")

DEFAULT_THRESHOLD_S = 0.2
STACK_FRAMES = 12  # innermost frames of a stack in the warning


class Pause(NamedTuple):
    end: float  # perf_counter
    s: float
    generation: int
    young: int  # allocations net of frees since the last pass (gc.get_count()[0]) when it began
    collected: int


class StallWatch:
    def __init__(self, lag: LagMeter, threshold_s: float = DEFAULT_THRESHOLD_S, period_s: float = 0.02,
                 loop_name: str = "") -> None:
        self.lag, self.threshold_s, self.period_s = lag, threshold_s, period_s
        self.loop_name = loop_name  # "" for the core's loop; the warning names any other ("gRPC edge")
        self.stalls = 0  # stalls reported (a metric)
        self.gc_pauses: collections.deque[Pause] = collections.deque(maxlen=256)
        self._gc_start, self._gc_young = 0.0, 0
        self._loop_thread = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall-watch", daemon=True)

    def start(self) -> None:
        """From the loop's thread."""
        self._loop_thread = threading.get_ident()
        gc.callbacks.append(self._gc)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._gc in gc.callbacks:
            gc.callbacks.remove(self._gc)
        if self._thread.is_alive():
            self._thread.join(1.0)

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start, self._gc_young = time.perf_counter(), gc.get_count()[0]
        elif self._gc_start:
            end = time.perf_counter()
            self.gc_pauses.append(Pause(end, end - self._gc_start, info.get("generation", -1), self._gc_young,
                                        info.get("collected", 0)))

    def _run(self) -> None:
        stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
        began = worst = 0.0
        reported_until = time.monotonic()  # stalls that ended before this are reported
        while not self._stop.wait(self.period_s):
            late = self.lag.overdue_s()
            if late >= self.threshold_s:
                if not began:
                    began, stacks = time.perf_counter() - late, collections.Counter()
                worst = max(worst, late)
                frame = sys._current_frames().get(self._loop_thread)
                if frame is not None:
                    stacks[stack_of(frame)] += 1
            elif began:
                self.report(began, time.perf_counter(), worst, stacks)
                began = worst = 0.0
                reported_until = time.monotonic()
            else:
                sampled_at, lag_s = self.lag.take_longest()
                if lag_s >= self.threshold_s and sampled_at > reported_until:  # a stall no look of ours saw
                    ago = time.monotonic() - sampled_at
                    ended = time.perf_counter() - ago
                    self.report(ended - lag_s, ended, lag_s, collections.Counter())
                    reported_until = time.monotonic()

    def report(self, began: float, ended: float, worst: float, stacks: collections.Counter) -> None:
        self.stalls += 1
        pauses = [p for p in list(self.gc_pauses) if began <= p.end <= ended]
        gc_part = "no garbage collection"
        if pauses:
            longest = max(pauses, key=lambda p: p.s)
            gc_part = (f"garbage collection {sum(p.s for p in pauses) * 1e3:.0f} ms in {len(pauses)} passes "
                       f"(generations {sorted({p.generation for p in pauses})}; the longest {longest.s * 1e3:.0f} ms, "
                       f"generation {longest.generation}, {longest.young:,} new objects since the last pass, "
                       f"{longest.collected:,} collected)")
        loop = f"the {self.loop_name} loop" if self.loop_name else "the loop"
        where = f"no stack sampled ({loop} ran again before this watch did)"
        if stacks:
            stack, seen = stacks.most_common(1)[0]
            where = f"{loop}'s stack in {seen} of {sum(stacks.values())} samples:\n  " + "\n  ".join(stack)
        log.warning("event loop stalled %.0f ms: %s; %s", worst * 1e3, gc_part, where)


def stack_of(frame) -> tuple[str, ...]:
    """The innermost STACK_FRAMES frames, innermost first, as `file:line function`."""
    out = []
    for f in reversed(traceback.extract_stack(frame)[-STACK_FRAMES:]):
        path = f.filename.rsplit("site-packages/", 1)[-1]
        out.append(f"{path}:{f.lineno} {f.name}")
    return tuple(out)
