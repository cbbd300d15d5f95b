"""The daemon <-> executor contract: typed messages over a multiprocessing Pipe. Read this first.

The executor (worker/executor.py, a child process) owns the device and the process group; the
daemon (worker/daemon.py) supervises it (worker/supervisor.py) and speaks for it to the
coordinator. Each message is a frozen dataclass; result rows and outcomes travel as serialized
protobuf so they reach the coordinator byte for byte.

    down (daemon -> executor):  Run, DropGroup, Exit
    up   (executor -> daemon):  Ready, StoreReady, Progress, Result, Done, GroupDropped
    from the supervisor itself: Exited (the pipe closed: the executor is gone)

Outside the pipe, two counters in shared memory let the daemon watch the executor without
asking it: `ops` grows by one per communication op, `beats` several times a second while the
process runs (a stopped or wedged executor stops beating).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ringleader.defaults import LOG_TAIL_BYTES, log_tail
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb


@dataclass(frozen=True)
class DeviceInfo:
    type: str  # cuda or cpu
    index: int
    name: str
    uuid: str
    memory_bytes: int
    backend: str  # nccl or gloo

    def to_pb(self) -> pb.Device:
        return pb.Device(type=self.type, index=self.index, name=self.name, uuid=self.uuid,
                         memory_bytes=self.memory_bytes)


# ---- down ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    assignment: bytes  # a serialized workers_pb2.Assignment
    # Where the executor sends its stderr (fd 2) during the job; the daemon picks it, so that it
    # can still read the log when the executor dies. "": no capture.
    log_path: str = ""


@dataclass(frozen=True)
class DropGroup:
    group_key: str


@dataclass(frozen=True)
class Exit:
    pass


# ---- up -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    device: DeviceInfo
    pid: int
    software: tuple[tuple[str, str], ...] = ()  # torch, CUDA, NCCL versions (worker/fingerprint.py)


@dataclass(frozen=True)
class StoreReady:
    job_id: str
    group_key: str
    port: int  # rank 0 bound its TCP store here


@dataclass(frozen=True)
class Progress:
    job_id: str
    done: int
    total: int
    size_bytes: int


@dataclass(frozen=True)
class Result:
    job_id: str
    row: bytes  # a serialized jobs_pb2.SizeResult (rank 0 only)


@dataclass(frozen=True)
class Done:
    """A rank's end of a job, whoever saw it end (the executor, or the daemon when the executor
    died, was aborted or could not take the job). `to_pb` is the one place a JobDone is built."""

    job_id: str
    ok: bool
    error: str = ""
    failure: int = wpb.FAILURE_KIND_UNSPECIFIED  # a workers_pb2.FailureKind
    holds: str = ""  # the group key the executor holds afterwards ("" when none)
    warm_start: bool = False
    results: tuple[bytes, ...] = ()  # rank 0: every size's serialized SizeResult
    outcome: tuple[str, bytes] | None = None  # rank 0 of other kinds: (kind, serialized outcome)
    log: str = ""  # the tail of the executor's stderr during the job (read_log)
    stragglers: bytes = b""  # rank 0 of collective sweeps: a serialized StragglerSummary
    evidence: tuple[str, bytes] | None = None  # every rank of a check: (member, its own serialized figures)

    @classmethod
    def failed(cls, job_id: str, error: str, failure: int, *, holds: str = "", warm_start: bool = False,
               log: str = "") -> "Done":
        return cls(job_id, ok=False, error=error, failure=failure, holds=holds, warm_start=warm_start, log=log)

    def to_pb(self, rank: int, executor_restarts: int) -> wpb.JobDone:
        done = wpb.JobDone(job_id=self.job_id, rank=rank, ok=self.ok, error=self.error, failure=self.failure,
                           warm_group=self.holds, warm_start=self.warm_start,
                           executor_restarts=executor_restarts, log=self.log,
                           results=[pb.SizeResult.FromString(r) for r in self.results])
        if self.outcome:
            kind, raw = self.outcome
            getattr(done, kind).ParseFromString(raw)
        if self.stragglers:
            done.stragglers.ParseFromString(self.stragglers)
        if self.evidence:
            member, raw = self.evidence
            getattr(done, member).ParseFromString(raw)
        return done


def read_log(path: str, limit: int = LOG_TAIL_BYTES) -> str:
    """The last `limit` bytes of a job's captured stderr (what Done.log carries), with a first
    line saying how much was dropped before them; "" when there is no such file."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - limit))
            return log_tail(f.read(), dropped=max(0, size - limit), limit=limit)
    except FileNotFoundError:  # nothing captured (or no path given)
        return ""


@dataclass(frozen=True)
class GroupDropped:
    group_key: str


# ---- from the supervisor ------------------------------------------------------------------


@dataclass(frozen=True)
class Exited:
    """The pipe closed: the executor is gone (the last message a handle delivers)."""
