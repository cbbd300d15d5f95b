"""Leader election on the database: several coordinators on one PostgreSQL, one leads.

The lease is one row (leader_lease): who holds it, its fencing token, when it expires, by the
database's clock so the coordinators' clocks never matter. States of a Lease:

    STANDBY --acquire (row free or expired: token + 1)--> LEADING --renewal missed--> DEPOSED

A standby tries every `ttl_s / 3` seconds; the leader renews as often. A leader that cannot renew
(it died, or the database is out of reach) stops counting itself leader `ttl_s - margin` after
the last renewal it *sent*, before the database lets a standby in (the row expires `ttl_s` after
that renewal was *executed*). DEPOSED is final: the process must stop writing and say so; a
coordinator that comes back runs as a standby. Whatever it still tries to write is refused by
the fence (coordinator/store/postgres.py): each write transaction commits only while its token
is the current, unexpired one.

A thread runs the lease (`start`); `on_change(lease)` is called from it when leading begins or
ends, so the owner hops onto its loop or stops the process.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

log = logging.getLogger("ringleader.coordinator")

STANDBY, LEADING, DEPOSED = "standby", "leading", "deposed"


class Deposed(RuntimeError):
    """This coordinator no longer holds the lease: nothing it writes is committed."""


class Lease:
    TABLE_SQL = """CREATE TABLE IF NOT EXISTS leader_lease (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,  -- the leader's gRPC address, told to clients by standbys
        token BIGINT NOT NULL,  -- the fencing token: + 1 at each new leader
        since TIMESTAMPTZ NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
    )"""
    # clock_timestamp, not now(): a group's transaction may be open for a while, now() is its start.
    ACQUIRE_SQL = """INSERT INTO leader_lease AS l (name, holder, token, since, expires_at)
        VALUES (%(name)s, %(holder)s, 1, clock_timestamp(), clock_timestamp() + %(ttl)s * interval '1 second')
        ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, token = l.token + 1,
            since = EXCLUDED.since, expires_at = EXCLUDED.expires_at
        WHERE l.expires_at < clock_timestamp()
        RETURNING token, extract(epoch FROM since)"""
    RENEW_SQL = """UPDATE leader_lease SET expires_at = clock_timestamp() + %(ttl)s * interval '1 second'
        WHERE name = %(name)s AND token = %(token)s AND expires_at > clock_timestamp() RETURNING 1"""
    FENCE_SQL = """SELECT 1 FROM leader_lease
        WHERE name = %s AND token = %s AND expires_at > clock_timestamp() FOR SHARE"""
    HOLDER_SQL = "SELECT holder, token FROM leader_lease WHERE name = %s AND expires_at > clock_timestamp()"

    def __init__(self, dsn: str, holder: str, ttl_s: float = 10.0, name: str = "coordinator",
                 on_change: Callable[["Lease"], None] | None = None) -> None:
        if ttl_s < 1.0:
            raise ValueError(f"lease ttl {ttl_s} s: at least 1 s")
        self.dsn, self.holder, self.ttl_s, self.name = dsn, holder, ttl_s, name
        self._on_change = on_change or (lambda lease: None)
        self.state = STANDBY
        self.token = 0
        self.since = 0.0  # wall time (database clock) this coordinator became leader
        self.failovers = 0  # leases taken over from an earlier leader (token > 1)
        self.leader = ""  # the current leader's address as last read ("" if none)
        self.why = ""  # why DEPOSED
        self._sent_ok = 0.0  # time.monotonic() when the last successful renewal was sent
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    @property
    def leading(self) -> bool:
        return self.state == LEADING

    def fence_args(self) -> tuple[str, int]:
        return (self.name, self.token)

    def start(self) -> "Lease":
        # Two threads: a renewal stuck on a database that stopped answering must not keep the
        # watchdog from deposing this leader in time.
        self._thread = threading.Thread(target=self._run, name="leader-lease", daemon=True)
        self._thread.start()
        threading.Thread(target=self._watch, name="leader-lease-watchdog", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=self.ttl_s)

    def lost(self, why: str) -> None:
        """Leading ends for good (a missed renewal, or a write the fence refused)."""
        with self._guard:
            if self.state != LEADING:
                return
            self.state, self.why = DEPOSED, why
        log.error("deposed as leader (lease token %d): %s; this coordinator must not write any more", self.token, why)
        self._on_change(self)

    def _run(self) -> None:
        import psycopg  # only coordinators on PostgreSQL need it

        period = self.ttl_s / 3
        conn = None
        while not self._stop.is_set() and self.state != DEPOSED:
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=max(1, int(period)),
                                           application_name=f"ringleader-lease {self.holder}"[:63])
                    conn.execute(self.TABLE_SQL)
                self._step(conn)
            except psycopg.Error as exc:
                log.warning("leader lease: %s", exc)
                if conn is not None:
                    conn.close()
                conn = None
            self._stop.wait(min(period, 0.5) if self.state == STANDBY else period / 2)
        if conn is not None:
            conn.close()

    def _step(self, conn) -> None:
        args = {"name": self.name, "holder": self.holder, "ttl": self.ttl_s, "token": self.token}
        sent = time.monotonic()
        if self.state == LEADING:
            if conn.execute(self.RENEW_SQL, args).fetchone() is not None:
                self._sent_ok = sent
            else:
                self.lost("the lease was taken over or expired before it was renewed")
            return
        row = conn.execute(self.ACQUIRE_SQL, args).fetchone()
        if row is None:
            current = conn.execute(self.HOLDER_SQL, (self.name,)).fetchone()
            self.leader = current[0] if current else ""
            return
        with self._guard:
            self.token, self.since, self._sent_ok = int(row[0]), float(row[1]), sent
            self.failovers += self.token > 1
            self.state, self.leader = LEADING, self.holder
        log.info("leading (lease token %d, ttl %.1f s)", self.token, self.ttl_s)
        self._on_change(self)

    def _watch(self) -> None:
        while not self._stop.wait(0.1) and self.state != DEPOSED:
            self._check_expiry()

    def _check_expiry(self) -> None:
        # Stop a little before the database's expiry: the renewal sent at _sent_ok ran later.
        margin = min(1.0, self.ttl_s / 5)
        if self.state == LEADING and time.monotonic() - self._sent_ok > self.ttl_s - margin:
            self.lost(f"no renewal reached the database for {self.ttl_s - margin:.1f} s")
