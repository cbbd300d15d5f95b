"""A write-behind store's writes (coordinator/store/behind.py), on a thread and a connection of
their own, so nothing waits for the database on the coordinator's loop. Group commit: the groups
(one per turn of the loop) handed over while the last transaction was committing are written
together as the next one, in the order they came, so the disk is waited for once per transaction
however many turns it holds. A transaction that fails fails every group in it. The database's own
part is a subclass's `_write`: PostgreSQL's (coordinator/store/postgres_writer.py, fenced by a
lease).

A group may also carry a `Share`: the store's own upkeep (the trends' downsampling) that needs the
database's answers as it goes. It runs in the group's transaction, after the group's statements,
and takes the writer's turn like any group; a savepoint keeps its failure its own, so a bad share
never fails the writes beside it.
"""

from __future__ import annotations

import abc
import threading
from concurrent.futures import Future
from typing import Any, Callable

# One statement of a group, with the rows it is run for (in order); or a Share and no rows.
Op = tuple["str | Share", list[tuple]]


class Share:
    """`fn(cursor)`, run inside the transaction of the group it is handed over with; `done` holds
    what it returned once that transaction commits, or why it did not."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn
        self.done: Future = Future()
        self._outcome: Any = None
        self._error: BaseException | None = None

    def run(self, cur) -> None:
        """`fn(cur)` under a savepoint of its own: its outcome kept, or its exception with what it
        did rolled back."""
        cur.execute("SAVEPOINT share")
        try:
            self._outcome = self.fn(cur)
        except Exception as exc:  # noqa: BLE001 - its own failure: handed to whoever waits on it
            cur.execute("ROLLBACK TO SAVEPOINT share")  # a broken connection raises here: the group fails too
            self._error = exc
        cur.execute("RELEASE SAVEPOINT share")

    def settle(self, failed: BaseException | None) -> None:
        """The transaction committed (`failed` None) or did not."""
        if failed is not None or self._error is not None:
            self.done.set_exception(failed or self._error)
        else:
            self.done.set_result(self._outcome)


class GroupWriter(abc.ABC):
    """The thread and its queue; a subclass writes a batch (`_write`) and closes its connection
    (`_disconnect`)."""

    thread_name = "store-writer"

    def __init__(self) -> None:
        self._queue: list[tuple[list[Op], Future]] = []
        self._wake = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def write(self, ops: list[Op]) -> Future:
        """Write `ops` after every group handed over before; the Future is done once they are
        durable (or failed)."""
        done: Future = Future()
        with self._wake:
            if self._closing:
                raise RuntimeError("the store's writer is closed")
            self._queue.append((ops, done))
            self._wake.notify()
        return done

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._queue and not self._closing:
                    self._wake.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            ops = merged(ops for ops, _ in batch)
            shares = [sql for sql, _ in ops if isinstance(sql, Share)]
            try:
                self._write(ops, shares)
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the groups
                for share in shares:
                    share.settle(exc)
                for _, done in batch:
                    done.set_exception(exc)
            else:
                for share in shares:  # before the groups': a caller waiting on its group sees its share done
                    share.settle(None)
                for _, done in batch:
                    done.set_result(None)

    @abc.abstractmethod
    def _write(self, ops: list[Op], shares: list[Share]) -> None:
        """One transaction: the statements of `ops` in order, then the shares, then COMMIT."""

    @abc.abstractmethod
    def _disconnect(self) -> None:
        """Close the connection (the thread has stopped)."""

    def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join()  # the groups handed over first
        self._disconnect()


def merged(groups) -> list[Op]:
    """The groups' statements in order, a run of the same statement as one executemany."""
    out: list[Op] = []
    for ops in groups:
        for sql, rows in ops:
            if out and out[-1][0] == sql:
                out[-1] = (sql, out[-1][1] + rows)
            else:
                out.append((sql, rows))
    return out
