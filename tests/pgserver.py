"""A throwaway PostgreSQL server for tests: initdb in a temporary directory, pg_ctl start on a
Unix socket of its own (no TCP port, so parallel runs never collide), stop and remove after.

As root, PostgreSQL refuses to run: the cluster then belongs to the `postgres` user (Debian's
package creates it) and the commands run through `runuser`. `find_bindir()` looks where Debian
puts the server binaries (/usr/lib/postgresql/N/bin) and on PATH; `PostgresServer.start` raises
`Unavailable` with the reason when none can be started, so the fixture can skip (or, with
RINGLEADER_REQUIRE_POSTGRES=1, as .ci/run sets, fail).
"""

from __future__ import annotations

import glob
import hashlib
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path


def schema_name(nodeid: str) -> str:
    """A schema name for one test (PostgreSQL names: at most 63 bytes)."""
    return "t" + hashlib.sha1(nodeid.encode()).hexdigest()[:20]


class Unavailable(RuntimeError):
    """No PostgreSQL server can be started here (the message says why)."""


def find_bindir() -> Path | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True):
        if Path(candidate, "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


class PostgresServer:
    """One cluster; `dsn` reaches its `postgres` database over the socket as the cluster's owner."""

    def __init__(self) -> None:
        self.bindir = find_bindir()
        self.root = Path(tempfile.mkdtemp(prefix="ringleader-pg-"))
        self.data = self.root / "data"
        self.sockets = self.root / "sock"
        self.user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        self.dsn = f"postgresql://{self.user}@/postgres?host={self.sockets}"

    def _run(self, *args: str) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise Unavailable(f"{args[0]} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")

    def start(self) -> "PostgresServer":
        if self.bindir is None:
            raise Unavailable("no initdb: install PostgreSQL (Debian: apt-get install postgresql)")
        self._make_dirs()
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", self.user, "--no-sync", "-E", "UTF8")
        self._serve()
        return self

    def _make_dirs(self) -> None:
        """The socket directory; as root, both it and the root owned by the server's user."""
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam(self.user)
            except KeyError:
                raise Unavailable("running as root and there is no `postgres` user to run the server as") from None
            os.chmod(self.root, 0o755)
            self.sockets.mkdir()
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            os.chown(self.sockets, pw.pw_uid, pw.pw_gid)
        else:
            self.sockets.mkdir()

    def _serve(self) -> None:
        # fsync stays on: the failover tests count on a commit being durable. No TCP listener.
        options = f"-k {self.sockets} -c listen_addresses='' -c max_connections=200"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-o", options, "-w", "-t", "60", "start")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
            except Unavailable:
                pass  # already gone; the directory goes below anyway
        shutil.rmtree(self.root, ignore_errors=True)

    def kill(self) -> None:
        """Stop at once, as a crashed primary does (no shutdown checkpoint, clients cut off)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def replica(self) -> "PostgresServer":
        """A streaming replica of this server (pg_basebackup -R), on a socket of its own, started,
        and made synchronous: a commit on this server returns once the replica has it too."""
        import psycopg

        r = PostgresServer()
        r.bindir = self.bindir
        r._make_dirs()
        r._run("pg_basebackup", "-D", str(r.data), "-d", f"host={self.sockets} user={self.user}", "-R", "-X", "stream")
        r._serve()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            conn.execute("SELECT pg_reload_conf()")
        return r

    def promote(self) -> None:
        """A replica becomes a primary that takes writes."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")

    def new_schema(self, name: str) -> str:
        """A DSN whose tables live in a new, empty schema `name` (each test gets its own, so tests
        never share rows; a schema is far cheaper to make than a database)."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        return f"{self.dsn}&options=-c%20search_path%3D{name}"
