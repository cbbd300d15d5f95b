"""The SQLite store's writes (coordinator/store/sqlite_behind.py): the group writer
(coordinator/store/group_writer.py), whose transactions run in a process of its own
(`python -m coordinator.store.sqlite_writer PATH`) on its own connection to the database file.

Why another process: the sqlite3 module lets go of the GIL in every statement, and executemany in
every row; while another thread wants it, taking it back waits up to a switch interval (5 ms).
On the coordinator's loop that stalled a placement pass starting 5,000 jobs for 0.3-0.8 s; on a
writer thread (measured on the 2-core development machine, 1,000 workers draining 2,000 jobs) its
transactions took 30-140 ms of wall time for 3-15 ms of CPU, and the user calls' p99 in the
drain went from 64-68 ms to 166-491 ms, since every handoff also preempts the loop's and the
gRPC edge's threads. Here a transaction is two handoffs in the coordinator (the pickled group
out, the answer back); the statements, and the Python that prepares them, take the child's GIL.

Why few statements, all the same: a run of one statement goes as multi-row statements (`INSERT ...
VALUES (..), (..)`, `UPDATE ... FROM (VALUES ..)`, `DELETE ... IN (..)`), in chunks of a power of
two rows, so their prepared forms are reused. A turn's writes interleave (a job's insert, its
update, its event, its results, the next job's insert...), so `levelled` first regroups them:
rows of different keys commute, so each row goes to the earliest level after the writes it
depends on (an earlier write of another statement to its table and key; for a job's own rows,
the job's insert), and a level is one statement per shape. A 300-job turn is 40 statements.
A statement of another shape goes row by row (executemany) where it stood.
"""

from __future__ import annotations

import functools
import os
import pickle
import re
import signal
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path
from typing import BinaryIO, Iterator

from coordinator.store.group_writer import GroupWriter, Op, Share, run_share

CHUNK_MAX = 256  # rows in one statement: 256 rows of the widest (12 columns) is 3,072 parameters of 32,766
_INSERT = re.compile(r"^\s*(?P<head>INSERT (?:OR REPLACE )?INTO (?P<table>\w+) \([^)]*\)\s+VALUES )"
                     r"(?P<one>\([^()]*\))(?P<tail>.*)$", re.S)
_UPDATE = re.compile(r"^UPDATE (?P<table>\w+) SET (?P<sets>(?:\w+ = \?, )*\w+ = \?) WHERE (?P<key>\w+) = \?$")
_DELETE = re.compile(r"^(?P<head>DELETE FROM (?P<table>\w+) WHERE \w+) = \?$")
UPDATE_FROM = sqlite3.sqlite_version_info >= (3, 33, 0)  # UPDATE ... FROM came in SQLite 3.33
JOB_ROWS = ("events", "results", "rank_logs")  # tables whose rows need their job's row (a foreign key)


@functools.lru_cache(maxsize=256)
def _shape(sql: str) -> tuple[str, int] | None:
    """(table, the place of the row's key in its parameters) of a statement `levelled` may move;
    None for any other (it stays between what came before and after it)."""
    for pattern, at in ((_INSERT, 0), (_UPDATE, -1), (_DELETE, 0)):
        if m := pattern.match(sql):
            return m["table"], at
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
        head, one, tail = m["head"], m["one"], m["tail"]
        for start, size in chunks(len(rows)):
            yield head + ", ".join([one] * size) + tail, [_flat(rows[start:start + size])]
    elif (m := _UPDATE.match(sql)) and UPDATE_FROM:
        table, sets, key = m["table"], m["sets"], m["key"]
        cols = [s.split(" = ")[0] for s in sets.split(", ")]
        last = list({row[-1]: row for row in rows}.values())  # a row is a whole new value: the last one counts
        one = "(" + ", ".join(["?"] * (len(cols) + 1)) + ")"
        set_sql = ", ".join(f"{c} = v.column{i + 1}" for i, c in enumerate(cols))
        for start, size in chunks(len(last)):
            yield (f"UPDATE {table} SET {set_sql} FROM (VALUES {', '.join([one] * size)}) AS v "
                   f"WHERE {table}.{key} = v.column{len(cols) + 1}", [_flat(last[start:start + size])])
    elif m := _DELETE.match(sql):
        for start, size in chunks(len(rows)):
            yield f"{m['head']} IN ({', '.join(['?'] * size)})", [tuple(row[0] for row in rows[start:start + size])]
    else:
        yield sql, rows


def _flat(rows: list[tuple]) -> tuple:
    return tuple(a for row in rows for a in row)


def transaction(conn: sqlite3.Connection, ops: list[Op], shares: list) -> list[tuple]:
    """One group's transaction (in the writer's process): its statements, then each share's
    `fn(conn)` under a savepoint of its own; (ok, outcome or error) per share."""
    outcomes: list[tuple] = []
    conn.execute("BEGIN")
    try:
        for sql, rows in levelled(ops):
            for stmt, params in statements(sql, rows):
                conn.executemany(stmt, params)
        for fn in shares:
            ok, value = run_share(conn, fn)
            outcomes.append((ok, value if ok else portable(value)))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return outcomes


def portable(exc: BaseException) -> tuple[str, str]:
    return type(exc).__name__, str(exc)


def rebuilt(name: str, text: str) -> Exception:
    """The writer process's exception, as the sqlite3 error of that name where there is one."""
    kind = getattr(sqlite3, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        return kind(text)
    return RuntimeError(f"{name}: {text}")


def send(out: BinaryIO, payload: bytes) -> None:
    out.write(struct.pack(">Q", len(payload)))
    out.write(payload)
    out.flush()


def receive(src: BinaryIO) -> bytes | None:
    """A frame, or None at the end of the stream."""
    head = src.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack(">Q", head)
    body = src.read(n)
    return body if len(body) == n else None


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, cached_statements=512)
    conn.execute("PRAGMA synchronous=NORMAL")  # per connection: as the record's (sqlite.py says why)
    conn.execute("PRAGMA foreign_keys=ON")
    return conn  # the WAL is checkpointed by its commits (autocheckpoint), in this process


def serve(path: str, src: BinaryIO, out: BinaryIO) -> None:
    """The writer process: a group in, its outcome out, until the coordinator closes the pipe."""
    conn = connect(path)
    try:
        while (frame := receive(src)) is not None:
            ops, shares = pickle.loads(frame)
            try:
                reply = ("ok", transaction(conn, ops, shares))
            except Exception as exc:  # noqa: BLE001 - the group's failure, handed back
                reply = ("failed", portable(exc))
            send(out, pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))
    finally:
        conn.close()


class SqliteGroupWriter(GroupWriter):
    thread_name = "sqlite-writer"

    def __init__(self, path: str) -> None:
        self.path = path
        self._child: subprocess.Popen | None = None
        self._spawn()
        super().__init__()

    def _spawn(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # the package's root, for the child's imports
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        self._child = subprocess.Popen([sys.executable, "-m", "coordinator.store.sqlite_writer", self.path],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    def _write(self, ops: list[Op], shares: list[Share]) -> None:
        if self._child is None or self._child.poll() is not None:  # it died since the last group: a new one
            self._reap()
            self._spawn()
        child = self._child
        assert child is not None and child.stdin is not None and child.stdout is not None
        payload = pickle.dumps(([op for op in ops if isinstance(op[0], str)], [s.fn for s in shares]),
                               protocol=pickle.HIGHEST_PROTOCOL)
        try:
            send(child.stdin, payload)
            frame = receive(child.stdout)
        except OSError:
            frame = None
        if frame is None:
            code = self._reap(kill=True)
            raise sqlite3.OperationalError(f"the SQLite writer process ended (exit code {code}); "
                                           "this group was not written")
        status, outcome = pickle.loads(frame)
        if status != "ok":
            raise rebuilt(*outcome)
        for share, (ok, value) in zip(shares, outcome):
            share.ran(ok, value if ok else rebuilt(*value))

    def _reap(self, kill: bool = False) -> int | None:
        """End the child (closing its pipe ends it; `kill`: at once) and its pipes; its exit code."""
        child, self._child = self._child, None
        if child is None:
            return None
        if kill:
            child.kill()
        try:
            child.stdin.close()  # type: ignore[union-attr]  # its end of the stream: it closes and exits
        except OSError:
            pass  # a dead reader: the pipe is broken
        try:
            code = child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            code = child.wait()
        child.stdout.close()  # type: ignore[union-attr]
        return code

    def _disconnect(self) -> None:
        self._reap()


def main() -> None:
    # The coordinator's signals are its own: on Ctrl-C or a stop it still hands over its last
    # group, and this process ends when its pipe does (the coordinator's exit, however it came).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    frames = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print goes to stderr, never into the frames
    serve(sys.argv[1], sys.stdin.buffer, frames)


if __name__ == "__main__":
    main()
