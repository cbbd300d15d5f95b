"""The time an input is applied at, given to the control core: `Control.handle(inp, now)`.

The shell reads the clocks (`Now.read()`) once per input; inside the input every part of the
core reads the same `Clock` (a test gives any time it likes, and two cores fed the same inputs at
the same times do the same)."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(slots=True)
class Now:
    mono: float  # time.monotonic(): timeouts, silences, progress
    wall: float  # time.time(): what is stored and shown (created_at, an event's time, a verdict's)

    @staticmethod
    def read() -> Now:
        """The shell's: the clocks as they read now."""
        return Now(time.monotonic(), time.time())


class Clock:
    """The time of the input being applied, for the core's parts (set by Control.handle)."""

    __slots__ = ("mono", "wall")

    def __init__(self) -> None:
        self.mono = self.wall = 0.0

    def set(self, now: Now) -> None:
        self.mono, self.wall = now.mono, now.wall


class SystemClock:
    """The clocks as they read now: for a job book or an event bus used alone (a tool, a test),
    outside a control core."""

    @property
    def mono(self) -> float:
        return time.monotonic()

    @property
    def wall(self) -> float:
        return time.time()
