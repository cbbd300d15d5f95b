"""How loaded the coordinator's event loop is, and what it does about it.

Everything the coordinator does runs on one asyncio loop, and the loop serves its ready callbacks
in arrival order: when thousands of workers report at once (a fleet draining a deep queue), a
user's call waits behind every worker message that arrived before it. Measured on a 2-core
machine before this: submit p99 of 16-22 s, and calls that timed out after 30 s.

- `IntakeGate`: at most `per_turn` worker messages, and at most `budget_s` of them, are applied per
  turn of the loop; the messages past that wait for the next turn, behind the user calls that
  arrived meanwhile. A count alone did not bound the turn: a message that ends a job of many ranks
  costs far more than a heartbeat (2,000 simulated workers draining a queue on 2 cores: 256-message
  turns of 60-77 ms). Throughput is not capped: turns are short and follow one another.
- `PassPacer`: the placement pass that inputs ask for runs once at the end of the loop's turn,
  for all of them (a pass per message took a third of a draining coordinator's CPU:
  docs/decisions/placement-pacing.md), and passes take at most a quarter of the loop. (A pass cut at a
  time budget and resumed in later turns was tried and measured: it lost a fifth of a drain's
  throughput, 3,470 against 4,295 jobs in 40 s with 3,000 simulated workers on 2 cores; passes
  run whole.)
  A pass starts at most `Timings.pass_ranks` ranks (--pass-ranks) and the next pass, paced so,
  goes on: a fleet freed at once made single passes of 100-1,200 ms (2-core machine and 2 x H200
  host: docs/decisions/placement-pacing.md).
- `LagMeter`: how late the loop runs a timer (sampled every `period_s`, the worst of the last
  `window_s`). Past `shed_lag_s`, calls that add work (submit, checks, localize, imports) are
  refused at once with `Overloaded` (RESOURCE_EXHAUSTED / 429 and a Retry-After) instead of
  queueing more work behind a loop that cannot keep up; reads are still answered.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from typing import Callable

from ringleader.errors import Overloaded

DEFAULT_PER_TURN = 256
DEFAULT_BUDGET_S = 0.004  # a turn's worker messages stop once they have taken this long
PASS_SPACING = 3.0  # after a pass of t seconds, the next waits until 3t have passed
DEFAULT_SHED_LAG_S = 2.0


class WorstOf:
    """The worst of the figures recorded over the last `window_s` (a gauge's reading).

    Only figures that a later one does not outdo are kept, so they fall from the oldest on: the
    first one still inside the window is the worst. Recorded once per worker message, a reading
    used to walk every message of the last second (10,000 with 10,000 workers)."""

    def __init__(self, window_s: float = 1.0) -> None:
        self.window_s = window_s
        self._samples: collections.deque[tuple[float, float]] = collections.deque()  # (at, figure)

    def record(self, figure: float, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        figure = max(0.0, figure)
        samples = self._samples
        while samples and samples[-1][1] <= figure:
            samples.pop()
        samples.append((now, figure))
        while samples[0][0] < now - self.window_s:
            samples.popleft()

    def worst(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        return next((x for at, x in self._samples if at >= now - self.window_s), 0.0)


class IntakeGate:
    """`gate.take()` before applying a worker message; when it says no, the rest wait for the next
    turn (coordinator/edge/worker_stream.py's inbox drains the workers' messages so)."""

    def __init__(self, per_turn: int = DEFAULT_PER_TURN, budget_s: float = DEFAULT_BUDGET_S) -> None:
        self.per_turn = per_turn  # 0: no bound (neither count nor time)
        self.budget_s = budget_s  # 0: no time bound
        self._used = 0
        self._since = 0.0  # when this turn's first message was taken
        self._reset_due = False
        self.deferred = 0  # messages that waited for a later turn (a metric, counted by the caller)
        # How long messages waited from the edge to their turn on the core (the caller records
        # it): the lane lets users' calls start ahead of them (coordinator/edge/hop.py).
        self.waits = WorstOf()

    def take(self) -> bool:
        """Whether a message may be applied in this turn (counted if so)."""
        if not self.per_turn:
            return True
        if not self._reset_due:  # the count starts again early in the next turn
            self._reset_due = True
            asyncio.get_running_loop().call_soon(self._next_turn)
            self._since = time.perf_counter()
        if self._used >= self.per_turn:
            return False
        if self._used and self.budget_s and time.perf_counter() - self._since >= self.budget_s:
            return False  # at least one a turn, however slow: the backlog always moves
        self._used += 1
        return True

    def _next_turn(self) -> None:
        self._reset_due = False
        self._used = 0

    def exclude(self, seconds: float) -> None:
        """Time of other work inside this turn's messages (users' calls at their checkpoints):
        not the messages' budget."""
        self._since += seconds

    def heard_until(self, now: float) -> float:
        """Until when every worker message that reached the coordinator has been applied: `now`,
        or when the oldest still waiting arrived (`waiting_since`, the inbox's: worker_stream.py).
        Control._tick keeps it no later than the tick's own `now`."""
        return self.waiting_since() or now

    def waiting_since(self) -> float:  # replaced by the inbox that feeds the core
        return 0.0


class PassPacer:
    """`soon()`: run `pass_` once at the end of this turn of the loop, however many ask. After a
    pass of t seconds the next waits until PASS_SPACING x t have passed: a cheap pass (~0.1 ms)
    is not held back; one that walks the thousands of workers a fleet-wide check holds no longer
    runs every turn."""

    def __init__(self, pass_: Callable[[], object], spacing: float = PASS_SPACING,
                 more: Callable[[], bool] = lambda: False) -> None:
        self._pass, self.spacing, self._more = pass_, spacing, more  # more(): a pass stopped short
        self._due = False
        self._last_end = self._last_s = 0.0

    def soon(self) -> None:
        if self._due:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a caller with no loop (a test driving the facade): no turn to wait for
            self._now()
            return
        self._due = True
        wait = self._last_end + self.spacing * self._last_s - time.monotonic()
        if wait > 0:
            loop.call_later(wait, self._now)
        else:
            loop.call_soon(self._now)

    def _now(self) -> None:
        self._due = False
        t0 = time.monotonic()
        self._pass()
        self._last_end = time.monotonic()
        self._last_s = self._last_end - t0
        if self._more():  # it started its share of ranks (Timings.pass_ranks): the rest in the next
            self.soon()


class LagMeter:
    """The loop's lag: how late a timer of `period_s` fires, the worst over the last `window_s`."""

    def __init__(self, shed_lag_s: float = DEFAULT_SHED_LAG_S, period_s: float = 0.05, window_s: float = 1.0) -> None:
        self.shed_lag_s = shed_lag_s  # 0: never shed
        self.period_s = period_s
        self._worst = WorstOf(window_s)
        self.shed = 0  # calls refused (a metric)
        self._task: asyncio.Task | None = None
        self._pending_since = 0.0  # when the sample now in flight was due (a stalled loop shows at once)
        self._longest = (0.0, 0.0)  # (when, how late) of the longest sample since take_longest (monotonic)

    def start(self) -> None:
        self._task = asyncio.create_task(self._sample_forever())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _sample_forever(self) -> None:
        while True:
            due = time.monotonic() + self.period_s
            self._pending_since = due
            await asyncio.sleep(self.period_s)
            self.record(time.monotonic() - due)

    def record(self, lag_s: float, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._worst.record(lag_s, now)
        if lag_s >= self._longest[1]:
            self._longest = (now, lag_s)

    def take_longest(self) -> tuple[float, float]:
        """(when, how late) of the longest sample since the last call, from another thread
        (coordinator/shell/stallwatch.py: a stall it did not see while it lasted)."""
        got, self._longest = self._longest, (0.0, 0.0)
        return got

    def overdue_s(self, now: float | None = None) -> float:
        """How late the sample in flight already is (negative while it is not yet due; 0 before
        sampling started): read from another thread by coordinator/shell/stallwatch.py too."""
        now = time.monotonic() if now is None else now
        return now - self._pending_since if self._pending_since else 0.0

    def lag_s(self, now: float | None = None) -> float:
        """The worst lag of the window, or how late the sample in flight already is."""
        now = time.monotonic() if now is None else now
        return max(self._worst.worst(now), self.overdue_s(now))

    def check(self, what: str, now: float | None = None) -> None:
        """Raise Overloaded when the loop is `shed_lag_s` or more behind."""
        if not self.shed_lag_s:
            return
        lag = self.lag_s(now)
        if lag >= self.shed_lag_s:
            self.shed += 1
            retry = max(1, math.ceil(2 * lag))
            raise Overloaded(f"{what}: the coordinator is saturated (its event loop runs {lag:.1f} s behind); "
                             f"retry after {retry} s", retry_after_s=retry)
