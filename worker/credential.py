"""The daemon's own credential: the secret the coordinator issued for its worker id at its first
registration (coordinator/edge/identity.py), presented on every later one.

Kept in memory, and with a state directory also in a file (readable by its owner only), so a
restarted daemon keeps its id; without one, a restarted daemon is refused its old id until an
operator resets it (`ringleader coordinator --forget-worker ID`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("ringleader.worker")


class WorkerSecret:
    def __init__(self, worker_id: str, state_dir: str = "") -> None:
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in worker_id)
        self.path = Path(state_dir) / f"worker-{safe}.secret" if state_dir else None
        self.value = self._load()

    def _load(self) -> str:
        if self.path is None:
            return ""
        try:
            return self.path.read_text().strip()
        except FileNotFoundError:
            return ""
        except OSError as exc:
            log.error("cannot read this worker's credential %s: %s", self.path, exc.strerror or exc)
            return ""

    def keep(self, secret: str) -> None:
        """Hold the secret just issued, and write it first to a file replaced in one step."""
        self.value = secret
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.unlink(missing_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secret + "\n")
            os.replace(tmp, self.path)
        except OSError as exc:  # kept in memory: only a restart of this daemon would lose it
            log.error("cannot write this worker's credential to %s: %s", self.path, exc.strerror or exc)
