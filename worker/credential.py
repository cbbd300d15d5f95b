"""The daemon's own credential: the secret the coordinator issued for its worker id at its first
registration (coordinator/edge/identity.py), presented on every later one.

Kept in memory, and with a state directory also in a file (readable by its owner only, written to
disk before the daemon acknowledges it: the coordinator binds the id only then), so a restarted
daemon keeps its id. Without one, a restarted daemon re-claims its old id only if something else
vouches for it: its worker certificate (mTLS), its pod's Kubernetes token (`read_token`), or an
operator's `ringleader workers approve ID`.
"""

from __future__ import annotations

import hashlib
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
                f.flush()
                os.fsync(f.fileno())  # on disk before it is acknowledged, a power loss included
            os.replace(tmp, self.path)
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # and the rename too
            finally:
                os.close(dir_fd)
        except OSError as exc:  # kept in memory: only a restart of this daemon would lose it
            log.error("cannot write this worker's credential to %s: %s", self.path, exc.strerror or exc)

    @property
    def sha256(self) -> str:
        """What the acknowledgement carries (CredentialStored.secret_sha256)."""
        return hashlib.sha256(self.value.encode()).hexdigest()


def read_token(path: str) -> str:
    """The pod's Kubernetes token, read at each registration (the kubelet rotates it); "" without."""
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError as exc:
        log.error("cannot read the Kubernetes token %s: %s", path, exc.strerror or exc)
        return ""
