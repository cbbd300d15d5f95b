"""The executor: a child process of the daemon that owns the device and the process group.

It speaks worker/api.py's messages with its daemon and NCCL or gloo with its peers. It keeps its
process group between jobs while the coordinator sends the same group key (a warm group), and
drops it when told (DropGroup: every member is told at once, so the graceful destroy completes).
An executor whose job failed reports and then exits, for its daemon to replace it (a fork from
the forkserver: milliseconds): the group is in an unknown state, an NCCL communicator after an
error cannot be trusted (re-initialising after an abort is not reliable in torch:
pytorch/pytorch#151159), and a failed init_process_group has already advanced torch's group
counter, so this process would rendezvous under store keys fresh peers never use (a
poisoned rank). A new group forms with rank 0 binding its TCP store on a free port and reporting
it (StoreReady) before the other ranks are told where to connect; forming it has its own
deadline (JobSpec.rendezvous_timeout_s), shorter than the collectives' timeout.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import shutil
import sys
import threading
import time
import traceback

from worker import api, faults

COLLECTIVE_TIMEOUT_S = 60  # gloo's and NCCL's own timeout for one collective of a formed group
BEAT_S = 0.2  # the liveness counter's period (the daemon watches it)
# Errors that a rank sees when a peer dies or hangs: reported as PEER_ERROR so the coordinator
# looks for the rank that caused them before blaming this one.
PEER_ERROR_MARKERS = ("Connection reset by peer", "Connection closed by peer", "Broken pipe",
                      "Socket Timeout", "Timed out", "remote process exited", "communicator was aborted")


def failure_kind(exc: BaseException) -> int:
    import torch.distributed as dist

    from ringleader.v1 import workers_pb2 as wpb

    # A store's wait timeout at rendezvous: the peers this rank waited for never came.
    peer_types = tuple(t for t in (getattr(dist, "DistNetworkError", None), getattr(dist, "DistStoreError", None))
                       if t)
    if isinstance(exc, peer_types) or any(m in str(exc) for m in PEER_ERROR_MARKERS):
        return wpb.PEER_ERROR
    return wpb.RANK_ERROR


def describe_device(device_arg: str) -> api.DeviceInfo:
    import torch

    if device_arg.startswith("cuda"):
        index = int(device_arg.split(":")[1])
        props = torch.cuda.get_device_properties(index)
        return api.DeviceInfo("cuda", index, props.name, str(getattr(props, "uuid", "")),
                              int(props.total_memory), "nccl")
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return api.DeviceInfo("cpu", 0, platform.processor() or platform.machine() or "cpu", "", int(memory), "gloo")


class Executor:
    def __init__(self, conn, device_arg: str, ops) -> None:
        import torch

        self.conn = conn
        self.ops = ops
        self.device = torch.device(device_arg)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.group_key = ""
        self.backend = ""
        self.broken = False  # a job failed: the group's state is unknown
        self.flavor = ""  # the communicator settings the group was created with
        # The checked jobs of recent specs: a warm group runs the same spec again and again, and
        # deriving one (the kind's view) cost more than a trivial job's op (36 us on CPU).
        self._jobs: dict[bytes, object] = {}

    def serve(self) -> bool:
        """Serve until told to exit (True), or until retiring after a failed job (False)."""
        from worker.fingerprint import executor_software

        self.conn.send(api.Ready(describe_device(str(self.device)), os.getpid(), executor_software()))
        while not isinstance(msg := self.conn.recv(), api.Exit):
            if isinstance(msg, api.Run):
                self.conn.send(self.run(msg))  # report first: tearing down may wait on peers
                if self.broken:
                    return False
                self._between_jobs()
            elif isinstance(msg, api.DropGroup):
                if msg.group_key == self.group_key:
                    self._destroy_group()
                self.conn.send(api.GroupDropped(msg.group_key))
        self._destroy_group()
        return True

    def run(self, msg: api.Run) -> api.Done:
        """Run a job with this process's stderr captured; the Done carries the capture's tail,
        whether the job succeeded or raised."""
        with StderrCapture(msg.log_path) as capture:
            done = self._run(msg.assignment)
        if not capture.wrote:  # most jobs print nothing: no file to open and read again
            return done
        return dataclasses.replace(done, log=api.read_log(msg.log_path))

    def _run(self, raw: bytes) -> api.Done:
        from ringleader.v1 import workers_pb2 as wpb
        from worker.kinds import RUNNERS, RunContext

        a = wpb.Assignment.FromString(raw)
        warm = bool(self.group_key) and self.group_key == a.group_key
        try:
            job = self._valid(a.spec)
            if job.flavor != a.flavor or (warm and self.flavor != a.flavor):
                raise ValueError(f"flavor: the job needs a group made with {job.flavor or 'defaults'!r}, "
                                 f"assigned {a.flavor or 'defaults'!r}, holding {self.flavor or 'defaults'!r}")
            if not warm:
                self._init_group(a)
            ctx = RunContext(a.job_id, a.rank, self.device, self.ops, self.conn.send)
            # No closing Progress: the Done below completes the job's progress on the coordinator
            # (a message less in a warm job's path through the pipe, the daemon and the stream).
            outcome = RUNNERS[job.kind](job, ctx)
        except Exception as exc:  # reported to the coordinator, which fails the job
            traceback.print_exc()  # the whole of it goes into the rank's log; the reason gets one line
            self.broken = True
            detail = f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, (MemoryError, ValueError)):
                detail += " | " + traceback.format_exc(limit=3).strip().splitlines()[-1]
            return api.Done.failed(a.job_id, detail, failure_kind(exc), warm_start=warm)
        first = a.rank == 0
        evidence = outcome.evidence_serialized()  # a check's: every rank's own, and no rank's outcome
        return api.Done(a.job_id, ok=True, holds=self.group_key, warm_start=warm, evidence=evidence,
                        results=tuple(r.SerializeToString() for r in outcome.results) if first else (),
                        outcome=outcome.serialized() if first and not evidence else None,
                        stragglers=outcome.stragglers.SerializeToString() if first and outcome.stragglers else b"")

    def _between_jobs(self) -> None:
        """Reported, and idle until the next message: what the next job of a warm group would do
        first is done now, off its path (its inputs filled)."""
        from worker.collectives import forget_setups, refill_kept

        try:
            refill_kept()
        except Exception:  # no job to fail here: the next one fills its own (and meets the fault itself)
            traceback.print_exc()
            forget_setups()

    JOBS_KEPT = 8

    def _valid(self, spec):
        """The spec's ValidJob (the coordinator checked it: derived, not re-checked), kept by the
        spec's bytes (deterministic: the same spec, the same bytes, in one process)."""
        from ringleader.jobspec import ValidJob

        key = spec.SerializeToString(deterministic=True)
        if (job := self._jobs.get(key)) is None:
            job = ValidJob.from_normalized(spec)
            if len(self._jobs) >= self.JOBS_KEPT:
                self._jobs.pop(next(iter(self._jobs)))
            self._jobs[key] = job
        return job

    def _init_group(self, a) -> None:
        import torch.distributed as dist

        from ringleader import jobspec
        from ringleader.algos import flavor_env
        from worker.algos import comm_env

        self._destroy_group()
        self.backend = a.backend
        # normalize filled it in; a coordinator of an older version sent none
        timeout = datetime.timedelta(seconds=a.spec.rendezvous_timeout_s or jobspec.DEFAULT_RENDEZVOUS_TIMEOUT_S)
        if a.rank == 0:  # bind first (a free port), then say where: no port can be taken between
            time.sleep(faults.load().delay_store_s)  # tests only (worker/faults.py)
            store = dist.TCPStore(a.store_host, a.store_port, a.world_size, is_master=True,
                                  timeout=timeout, wait_for_workers=False)
            self.conn.send(api.StoreReady(a.job_id, a.group_key, store.port))
        else:
            store = dist.TCPStore(a.store_host, a.store_port, a.world_size, is_master=False, timeout=timeout)
        kwargs = {"device_id": self.device} if a.backend == "nccl" else {}
        # A flavor's NCCL_ALGO/NCCL_PROTO are read when the communicator is created: with
        # device_id, inside init_process_group; restored after, so no later group inherits them.
        with comm_env(flavor_env(a.flavor)):
            dist.init_process_group(a.backend, store=store, rank=a.rank, world_size=a.world_size,
                                    timeout=timeout, **kwargs)
        # The rendezvous deadline bounded forming the group; its collectives get their own.
        _set_pg_timeout(datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
        self.group_key, self.flavor = a.group_key, a.flavor

    def _destroy_group(self) -> None:
        import torch.distributed as dist

        from worker.collectives import forget_setups

        self.group_key, self.flavor, self.broken = "", "", False
        forget_setups()  # bound to the group that goes
        if dist.is_initialized():
            dist.destroy_process_group()


def _set_pg_timeout(timeout: datetime.timedelta) -> None:
    """The default group's collective timeout, changed after init (a private torch function,
    present since torch 2.3; this project pins a newer one)."""
    from torch.distributed.distributed_c10d import _set_pg_timeout as set_timeout

    set_timeout(timeout)


class StderrCapture:
    """Send this process's fd 2 to `path` for a job's duration: Python's tracebacks and warnings,
    and the C++ side's output (NCCL, gloo, torch) alike. Afterwards fd 2 is restored and what the
    job wrote is copied to it, so the worker's own log still has everything, in one piece."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._saved = -1
        self.wrote = True  # whether the job wrote anything (known after the block; True: maybe)

    def __enter__(self) -> "StderrCapture":
        if self.path:
            sys.stderr.flush()
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            except OSError:  # the daemon's log directory is gone (it is stopping): run uncaptured
                return self
            self._saved = os.dup(2)
            os.dup2(fd, 2)
            os.close(fd)
        return self

    def __exit__(self, *exc) -> None:
        if self._saved < 0:
            return
        sys.stderr.flush()
        self.wrote = os.fstat(2).st_size > 0  # fd 2 is still the capture
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._saved = -1
        if not self.wrote:
            return
        try:
            with open(self.path, "rb") as f, open(2, "wb", closefd=False) as err:
                shutil.copyfileobj(f, err)
        except OSError:
            pass  # the worker's own stderr is gone: the captured copy is what matters


PROCESS_NAME = b"rl-executor"  # what ps and /proc/PID/comm show


def _die_with_parent() -> None:
    """Linux: have the kernel kill this process when its parent, the forkserver, dies, even by
    SIGKILL (its daemon is watched by _die_with_daemon); and name it for ps."""
    try:
        import ctypes
        import signal

        PR_SET_PDEATHSIG, PR_SET_NAME = 1, 15
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        libc.prctl(PR_SET_NAME, ctypes.c_char_p(PROCESS_NAME))
    except (OSError, AttributeError):
        pass  # not Linux: the executor notices the closed pipe at its next receive instead


def _die_with_daemon(daemon_pid: int) -> None:
    """Kill this process as soon as its daemon exits, however it does. The parent death signal
    is not enough: the parent is the forkserver, which exits only once every process holding its
    daemon's end of the alive pipe has, and each executor it forked holds one. An executor waiting
    in a collective whose peer is gone (NCCL spins) kept itself and its forkserver alive: measured
    on 2 x H200, a killed daemon's executor at 100 % of its GPU for minutes, quarantining the GPU
    it left behind. A pidfd is readable once the process it names has exited."""
    if not daemon_pid or not hasattr(os, "pidfd_open"):
        return  # not Linux 5.3+: the parent death signal and the closed pipe remain
    import select
    import signal

    try:
        fd = os.pidfd_open(daemon_pid)
    except ProcessLookupError:
        os._exit(1)  # the daemon is gone already
    except OSError:
        return

    def watch() -> None:
        waiter = select.poll()  # not select.select: no FD_SETSIZE limit on the descriptor's number
        waiter.register(fd, select.POLLIN)
        while not waiter.poll():
            pass
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup: a wedged communicator's could block exit

    threading.Thread(target=watch, daemon=True, name="daemon-watch").start()


def _beat(beats) -> None:
    """Tick a shared counter while this process runs: the daemon reads a stopped count as a
    stopped or wedged executor."""
    while True:
        beats.value += 1
        time.sleep(BEAT_S)


def main(conn, device_arg: str, ops, beats, advertise: str = "", daemon_pid: int = 0) -> None:
    """Entry point of the executor process (a multiprocessing target)."""
    _die_with_parent()
    _die_with_daemon(daemon_pid)
    threading.Thread(target=_beat, args=(beats,), daemon=True, name="beat").start()
    from worker.graphs import set_comm_env

    set_comm_env()  # before any communicator: NCCL reads it at creation (worker/graphs.py says why)
    if advertise:
        from worker.netif import pin_interfaces

        pin_interfaces(advertise, os.environ)
    try:
        if not Executor(conn, device_arg, ops).serve():
            # Retire without running destructors: a wedged NCCL communicator's could block exit.
            conn.close()
            os._exit(0)
    except (EOFError, KeyboardInterrupt):  # the daemon went away: nothing left to report to
        pass
