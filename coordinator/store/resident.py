"""The stored form of the unfinished jobs a SQLite store wrote (coordinator/store/sqlite.py), kept
in memory so that updating or reading one does not read its row back first.

Why: the sqlite3 module lets go of the GIL in every statement, and while the gRPC edge thread
wants it, taking it back can wait out a switch interval. A placement pass that starts a drained
fleet's jobs updates each one: with a read-back per update, such passes stalled the coordinator's
loop for 0.2-1 s (5,000 simulated workers draining a queue, 2 x H200 host, 2026-11-26). Only what the
store itself committed, or is about to commit in its open group, is here: a group that fails to
commit empties it, and a finished job leaves it (its row is read back as before).
"""

from __future__ import annotations

from ringleader import states
from ringleader.v1 import jobs_pb2 as pb


class Resident:
    def __init__(self) -> None:
        self._jobs: dict[str, pb.Job] = {}

    def get(self, job_id: str) -> pb.Job | None:
        """A copy of the stored job (no results), or None when it is not here."""
        job = self._jobs.get(job_id)
        if job is None:
            return None
        out = pb.Job()
        out.CopyFrom(job)
        return out

    def put(self, job: pb.Job) -> None:
        """`job` as just written (no results; the store hands it over); a finished one leaves."""
        if job.state in states.UNFINISHED:
            self._jobs[job.id] = job
        else:
            self._jobs.pop(job.id, None)

    def clear(self) -> None:
        """What the store wrote was not committed after all."""
        self._jobs.clear()
