"""Which rank reaches the job's ops last, and by how much: the StragglerSummary of a collective
sweep, from the per-iteration times every rank already shares (collectives.summarize). Pure.

No clock is compared across ranks (hosts' clocks differ by more than the lags sought). A blocking
collective ends on every rank at about the same moment, when the last rank's data is in; so the
rank that arrived last waits least inside the op, and each rank's lateness at one op is the
longest time any rank spent in that op minus its own. A rank is the straggler when it is last in
at least LAST_SHARE of the ops and its mean lag is at least MIN_LAG_SHARE of the mean op time and
MIN_LAG_US (below that, clock granularity and scheduling noise). Rooted ops (broadcast, reduce,
gather, scatter) end at different moments by design, so their lags are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LAST_SHARE = 0.75
MIN_LAG_SHARE = 0.10
MIN_LAG_US = 20.0
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})


@dataclass
class StragglerTally:
    """Lags summed over a job's ops, size by size (`add`), then `summary()`."""

    ranks: int = 0
    ops: int = 0
    lag_us: list[float] = field(default_factory=list)
    last: list[int] = field(default_factory=list)
    op_time_us: float = 0.0  # sum over ops of the longest time in the op

    def add(self, op: str, times_by_rank: list[list[float]]) -> None:
        """One size's per-iteration times (us), rank by rank, each rank the same count."""
        if op in ROOTED or len(times_by_rank) < 2:
            return
        if not self.ranks:
            self.ranks = len(times_by_rank)
            self.lag_us, self.last = [0.0] * self.ranks, [0] * self.ranks
        if len(times_by_rank) != self.ranks:
            raise ValueError(f"times_by_rank: {len(times_by_rank)} ranks, the job has {self.ranks}")
        for k in range(len(times_by_rank[0])):
            column = [ts[k] for ts in times_by_rank]
            longest = max(column)
            for r, t in enumerate(column):
                self.lag_us[r] += longest - t
            self.last[column.index(min(column))] += 1
            self.op_time_us += longest
            self.ops += 1

    def summary(self) -> dict:
        """The StragglerSummary fields (straggler -1 when no rank is consistently last)."""
        if not self.ops:
            return {"ranks": [], "straggler": -1, "straggler_lag_us": 0.0}
        rows = [{"rank": r, "mean_lag_us": self.lag_us[r] / self.ops, "last_share": self.last[r] / self.ops}
                for r in range(self.ranks)]
        top = max(rows, key=lambda x: x["last_share"])
        floor = max(MIN_LAG_US, MIN_LAG_SHARE * self.op_time_us / self.ops)
        if top["last_share"] >= LAST_SHARE and top["mean_lag_us"] >= floor:
            return {"ranks": rows, "straggler": top["rank"], "straggler_lag_us": top["mean_lag_us"]}
        return {"ranks": rows, "straggler": -1, "straggler_lag_us": 0.0}
