"""Where a daemon's executors capture each rank's stderr: one file per (job, rank) in a private
temporary folder (made when the daemon runs), read back into the rank's Done, removed once sent."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from worker import api


class RankLogs:
    def __init__(self) -> None:
        self.folder = ""  # none before open(): the executors then run uncaptured

    def open(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="ringleader-logs-")

    def close(self) -> None:
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def path(self, job_id: str, rank: int) -> str:
        safe = "".join(c if c.isalnum() else "_" for c in job_id)  # ids are the coordinator's: stay in the dir
        return os.path.join(self.folder, f"{safe}.rank{rank}.log") if self.folder else ""

    def last(self, job_id: str, rank: int, why: str) -> str:
        """What a lost executor wrote during the job, and a line saying how it was lost."""
        text = api.read_log(self.path(job_id, rank))
        return text + ("\n" if text and not text.endswith("\n") else "") + f"[ringleader: {why}]\n"

    def remove(self, job_id: str, rank: int) -> None:
        if self.folder:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path(job_id, rank))
