"""Young garbage-collection passes at least every `pace_s` (RINGLEADER_GC_PACE_S; 0: off).

CPython starts a young pass when allocations net of deallocations reach the threshold
(process.py's GC_YOUNG), and every freed object counts as a deallocation, old ones included. In a
coordinator draining a deep queue, old objects (the queued jobs) die all the time, so passes come
late: 13-14.5 s apart on the device before the one pass of 160-290 ms that set the churn's p99
(bench/results/2026-11-27-h200x2-r17), where passes 1-2 s apart took 40-100 ms. A pass walks
what was allocated since the last one and still lives, so the wait decides its length.

A thread starts a young pass (the middle generation's, when it is due by its own threshold)
whenever none has run for `pace_s`. Passes that CPython starts itself are left alone, and the
oldest generation stays CPython's (its passes follow from the others' counts, as before)."""

from __future__ import annotations

import gc
import os
import threading
import time

from ringleader.errors import InvalidSpec

ENV = "RINGLEADER_GC_PACE_S"


class GcPacer:
    def __init__(self, pace_s: float) -> None:
        if pace_s < 0:
            raise InvalidSpec(ENV, f"must be 0 (off) or a number of seconds, got {pace_s}")
        self.pace_s = pace_s
        self.paced = 0  # passes this pacer started
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gc-pacer", daemon=True)

    @classmethod
    def from_env(cls) -> "GcPacer":
        raw = os.environ.get(ENV, "0") or "0"
        try:
            return cls(float(raw))
        except ValueError:
            raise InvalidSpec(ENV, f"must be a number of seconds, got {raw[:32]!r}") from None

    def start(self) -> None:
        if self.pace_s:
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
            self._last = time.monotonic()

    def _run(self) -> None:
        while not self._stop.wait(self.pace_s / 4):
            if time.monotonic() - self._last >= self.pace_s and gc.isenabled():
                due = gc.get_count()[1] >= gc.get_threshold()[1]
                gc.collect(1 if due else 0)
                self.paced += 1
