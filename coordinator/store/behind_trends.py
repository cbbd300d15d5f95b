"""A write-behind store's (coordinator/store/behind.py) bandwidth trends: written with the group,
read from the database once the groups before are durable, and downsampled by the writer.

A call on the coordinator's loop never waits for the downsampling: it hands the share to the
writer with the turn's group (group_writer.Share: the same transaction), and the next call takes
up the state the share left once it is durable. The share itself is the database's:
`trend_share(state, now, cursor)` (SQLite's in coordinator/store/sqlite_trends.py, PostgreSQL's
in coordinator/store/postgres_trends.py). A mixin of WriteBehindStore, which provides _mem,
_write, _written, _sync, _pending, _record.
"""

from __future__ import annotations

import functools

from coordinator.store.group_writer import Share
from coordinator.store.sqlite_trends import TREND_UPSERT, trend_rows
from coordinator.store.trends import Downsampling, TrendBucket, TrendHour, TrendPoint, TrendQuery


class BehindTrends:
    _downsampled: Downsampling | None = None  # the state the last durable share left
    _share: Share | None = None  # the share handed over and not yet taken up

    def add_trend(self, point: TrendPoint) -> None:
        with self._mem:  # type: ignore[attr-defined]  # not kept in memory: trend reads go to the database
            self._write("", TREND_UPSERT, *trend_rows(point))  # type: ignore[attr-defined]
        self._written()  # type: ignore[attr-defined]

    def trend(self, query: TrendQuery) -> list[TrendBucket]:
        self._sync()  # type: ignore[attr-defined]
        return self._record.trend(query)  # type: ignore[attr-defined]

    def trend_hours(self, query: TrendQuery) -> list[TrendHour]:
        self._sync()  # type: ignore[attr-defined]
        return self._record.trend_hours(query)  # type: ignore[attr-defined]

    def downsample_trends(self, now: float) -> bool:
        """A share handed to the writer with this turn's group. With deferred commits (the
        coordinator) True at once: more may be due, the next call looks once the share is durable;
        else, as SQLite's, once it is: whether it merged a window."""
        with self._mem:  # type: ignore[attr-defined]
            if self._share is not None:
                if not self._share.done.done():
                    return True  # the last share is still being written: the next call goes on
                self._take_up()
            state = self._downsampled
            if state is not None and not state.due(now):
                return False  # nothing due: no share
            self._share = Share(functools.partial(self.trend_share, state, now))  # type: ignore[attr-defined]
            self._write("", self._share)  # type: ignore[attr-defined]
        if self._pending is not None:  # type: ignore[attr-defined]
            return True
        try:
            self._sync()  # type: ignore[attr-defined]  # the group, and the share with it
        finally:
            with self._mem:  # type: ignore[attr-defined]
                share, self._share = self._share, None
        self._downsampled, merged = share.done.result()  # type: ignore[union-attr]
        return merged

    def _take_up(self) -> None:
        """Adopt the state the finished share left (raises what it raised: the next call does it again)."""
        share, self._share = self._share, None
        self._downsampled, _ = share.done.result()  # type: ignore[union-attr]
