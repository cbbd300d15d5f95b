"""The SQLite store's WAL checkpoints, on a thread of their own (coordinator/store/sqlite.py turns
the connection's own off when it defers commits): in WAL mode with synchronous=NORMAL a
checkpoint is the only step that waits for fsync, and a PASSIVE one runs beside the writer
without blocking it."""

from __future__ import annotations

import logging
import sqlite3
import threading

log = logging.getLogger("ringleader.coordinator")

CHECKPOINT_S = 1.0  # how often the thread copies the WAL back into the database


class Checkpoints:
    def __init__(self, path: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._forever, args=(path,), name="sqlite-checkpoint", daemon=True)
        self._thread.start()

    def _forever(self, path: str) -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            while not self._stop.wait(CHECKPOINT_S):
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error as exc:  # busy or I/O: the next round tries again
                    log.warning("WAL checkpoint failed: %s", exc)
        finally:
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
