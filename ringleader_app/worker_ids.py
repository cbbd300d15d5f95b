"""Stable default ids for CPU workers: HOST-cpu0, HOST-cpu1, ... (GPU workers are HOST-cudaN).

Several CPU daemons may share a host, so the number is the lowest one no running daemon holds:
each holds an flock on its number's file for its lifetime. A restarted worker takes its number
again and comes back as the same worker, where a PID in the id made it a new one each time.
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile

_held: list[int] = []  # lock files held open for the life of the process


def lock_dir() -> str:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    path = os.path.join(base, f"ringleader-{os.getuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def cpu_worker_id(host: str | None = None, limit: int = 4096) -> str:
    """The first HOST-cpuN whose lock this process can take (and keeps until it exits)."""
    host = host or socket.gethostname()
    for n in range(limit):
        fd = os.open(os.path.join(lock_dir(), f"{host}-cpu{n}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _held.append(fd)
        return f"{host}-cpu{n}"
    raise RuntimeError(f"no free CPU worker number below {limit} on {host}")
