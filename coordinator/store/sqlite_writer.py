"""The SQLite store's writes (coordinator/store/sqlite_behind.py): the group writer
(coordinator/store/group_writer.py) on a connection of its own to the database file.

Why few statements: the sqlite3 module lets go of the GIL in every statement, and executemany in
every row; while another thread wants it, taking it back can wait out a switch interval (5 ms).
Measured on the 2-core development machine beside one busy thread: 1.4 ms an UPDATE, 0.6 ms a row
of executemany. So a run of one statement goes as multi-row statements (`INSERT ... VALUES (..),
(..)`, `UPDATE ... FROM (VALUES ..)`, `DELETE ... IN (..)`), in chunks of a power of two rows, so
their prepared forms are reused: a transaction of a thousand rows is a dozen handoffs, not a
thousand. A statement of another shape goes row by row (executemany).

A turn's writes interleave (a job's insert, its update, its event, its results, the next job's
insert...), so runs of one statement are short. `levelled` regroups them: rows of different
keys commute, so each row goes to the earliest level after the writes it depends on (an earlier
write of another statement to its table and key; for a job's own rows, the job's insert), and a
level is one statement per shape. A draining turn is then a few levels, however many jobs it holds.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from typing import Iterator

from coordinator.store.group_writer import GroupWriter, Op, Share

CHUNK_MAX = 256  # rows in one statement: 256 rows of the widest (12 columns) is 3,072 parameters of 32,766
_INSERT = re.compile(r"^\s*(INSERT (?:OR REPLACE )?INTO \w+ \([^)]*\)\s+VALUES )(\([^()]*\))(.*)$", re.S)
_UPDATE = re.compile(r"^UPDATE (\w+) SET ((?:\w+ = \?, )*\w+ = \?) WHERE (\w+) = \?$")
_DELETE = re.compile(r"^(DELETE FROM \w+ WHERE \w+) = \?$")
UPDATE_FROM = sqlite3.sqlite_version_info >= (3, 33, 0)  # UPDATE ... FROM came in SQLite 3.33
JOB_ROWS = ("events", "results", "rank_logs")  # tables whose rows need their job's row (a foreign key)


@functools.lru_cache(maxsize=256)
def _shape(sql: str) -> tuple[str, int] | None:
    """(table, the place of the row's key in its parameters) of a statement `levelled` may move;
    None for any other (it stays between what came before and after it)."""
    if m := _INSERT.match(sql):
        return re.search(r"INTO (\w+)", m.group(1)).group(1), 0  # type: ignore[union-attr]
    if m := _UPDATE.match(sql):
        return m.group(1), -1
    if m := _DELETE.match(sql):
        return m.group(1).split()[2], 0
    return None


def levelled(ops: list[Op]) -> list[Op]:
    """`ops` regrouped into as few runs of one statement as their order allows (the module says
    how); shares stay last, as the writer runs them."""
    levels: list[dict[str, list[tuple]]] = []
    last: dict[tuple[str, object], tuple[int, str]] = {}  # (table, key) -> level and statement of its last row
    floor = 0  # no row goes before a statement of unknown shape
    for sql, rows in ops:
        if not isinstance(sql, str):
            continue
        shape = _shape(sql)
        if shape is None:
            floor = len(levels) + 1
            levels.append({sql: list(rows)})
            continue
        table, at = shape
        for row in rows:
            key = row[at]
            level = floor
            if (prior := last.get((table, key))) is not None:
                level = max(level, prior[0] + (prior[1] != sql))
            if table in JOB_ROWS and (job := last.get(("jobs", key))) is not None:
                level = max(level, job[0] + 1)
            while len(levels) <= level:
                levels.append({})
            levels[level].setdefault(sql, []).append(row)
            last[(table, key)] = (level, sql)
    return [(sql, rows) for level in levels for sql, rows in level.items()] + [op for op in ops if not isinstance(op[0], str)]


def chunks(n: int) -> Iterator[tuple[int, int]]:
    """(start, size) pieces of n rows, each a power of two up to CHUNK_MAX."""
    start = 0
    while start < n:
        size = min(CHUNK_MAX, 1 << ((n - start).bit_length() - 1))
        yield start, size
        start += size


def statements(sql: str, rows: list[tuple]) -> Iterator[tuple[str, list[tuple]]]:
    """`sql` run for `rows`, in order, as multi-row statements, each with its one row of
    parameters; or, for a shape it does not know, `sql` itself with the rows."""
    if m := _INSERT.match(sql):
        head, one, tail = m.groups()
        for start, size in chunks(len(rows)):
            yield head + ", ".join([one] * size) + tail, [_flat(rows[start:start + size])]
    elif (m := _UPDATE.match(sql)) and UPDATE_FROM:
        table, sets, key = m.groups()
        cols = [s.split(" = ")[0] for s in sets.split(", ")]
        last = list({row[-1]: row for row in rows}.values())  # a row is a whole new value: the last one counts
        one = "(" + ", ".join(["?"] * (len(cols) + 1)) + ")"
        set_sql = ", ".join(f"{c} = v.column{i + 1}" for i, c in enumerate(cols))
        for start, size in chunks(len(last)):
            yield (f"UPDATE {table} SET {set_sql} FROM (VALUES {', '.join([one] * size)}) AS v "
                   f"WHERE {table}.{key} = v.column{len(cols) + 1}", [_flat(last[start:start + size])])
    elif m := _DELETE.match(sql):
        for start, size in chunks(len(rows)):
            yield f"{m.group(1)} IN ({', '.join(['?'] * size)})", [tuple(row[0] for row in rows[start:start + size])]
    else:
        yield sql, rows


def _flat(rows: list[tuple]) -> tuple:
    return tuple(a for row in rows for a in row)


class SqliteGroupWriter(GroupWriter):
    thread_name = "sqlite-writer"

    def __init__(self, path: str) -> None:
        # Its own connection: the record's (reads) never waits on it, nor it on them (WAL). The
        # WAL is checkpointed by this connection's commits (autocheckpoint): on this thread.
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, cached_statements=512)
        self._conn.execute("PRAGMA synchronous=NORMAL")  # per connection: as the record's (sqlite.py says why)
        self._conn.execute("PRAGMA foreign_keys=ON")
        super().__init__()

    def _write(self, ops: list[Op], shares: list[Share]) -> None:
        c = self._conn
        c.execute("BEGIN")
        try:
            for sql, rows in levelled(ops):
                if isinstance(sql, str):
                    for stmt, params in statements(sql, rows):
                        c.executemany(stmt, params)
            for share in shares:
                share.run(c)
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise

    def _disconnect(self) -> None:
        self._conn.close()
