"""The daemon's handle on its executor child: start, talk, watch from outside, kill.

Executors are forked from a forkserver that has already imported torch, so replacing one (after
an abort, a crash or a wedged group) takes milliseconds instead of a second of imports. A new
handle reads the executor's Ready straight off its pipe before anything else listens; only then
does the daemon's loop read the pipe itself (PipeReader), delivering each message as
`on_message(handle, msg)`, ending with api.Exited when the pipe closes. One reader, so no message
can go astray.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import pickle
import struct
import time
from multiprocessing import forkserver
from typing import Callable

from ringleader.security import USERS_TOKEN_ENV, WORKERS_TOKEN_ENV
from worker import api

# The credentials' variables (ringleader/security.py, ringleader_app/security_flags.py).
SECRET_ENV = (WORKERS_TOKEN_ENV, USERS_TOKEN_ENV, "RINGLEADER_WORKER_TOKEN_FILE", "RINGLEADER_TOKEN_FILE")
READY_TIMEOUT_S = 120  # importing torch and creating a CUDA context can take a while
UNRESPONSIVE_S = 3.0  # no beat for this long: the executor is not responding

_CONTEXT = None


def _context():
    """One forkserver per daemon process, preloaded with torch, started now without the tokens
    in its environment: the executors it forks run job code and need neither."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = mp.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(["torch", "torch.distributed", "worker.executor"])
        saved = {name: os.environ.pop(name) for name in SECRET_ENV if name in os.environ}
        try:
            forkserver.ensure_running()
        finally:
            os.environ.update(saved)
    return _CONTEXT


def torch_installed() -> bool:
    """Found without importing it: the daemon itself never imports torch (its executors do)."""
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


class ExecutorStartError(RuntimeError):
    pass


class ExecutorHandle:
    def __init__(self, device: str, on_message: Callable[["ExecutorHandle", object], None],
                 advertise: str = "") -> None:
        self.device = device
        self.advertise = advertise
        self.on_message = on_message
        self.pid = 0
        self.software: tuple[tuple[str, str], ...] = ()  # the executor's torch/CUDA/NCCL versions
        self._ops = None
        self._beats = None
        self._proc = None
        self._conn = None
        self._reader: PipeReader | None = None
        self._last_beat = (-1, time.monotonic())  # (value, when it last changed)

    async def start(self) -> api.DeviceInfo:
        """Start the executor and wait for its Ready; ExecutorStartError if it never comes."""
        from worker import executor

        ctx = _context()
        parent, child = ctx.Pipe()
        self._ops, self._beats = ctx.Value("q", 0, lock=False), ctx.Value("q", 0, lock=False)
        self._proc = ctx.Process(target=executor.main, args=(child, self.device, self._ops, self._beats,
                                                             self.advertise, os.getpid()),
                                 name=f"ringleader-executor-{self.device}", daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        ready = await asyncio.to_thread(self._first_message, READY_TIMEOUT_S)
        if not isinstance(ready, api.Ready):
            await self.kill()
            raise ExecutorStartError(f"executor for {self.device} failed to start ({ready})")
        self.pid = ready.pid
        self.software = ready.software
        self._reader = PipeReader(parent.fileno(), asyncio.get_running_loop(), lambda msg: self.on_message(self, msg))
        return ready.device

    def _first_message(self, timeout: float):
        try:
            if not self._conn.poll(timeout):
                return f"no answer within {timeout:.0f} s"
            return self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(5)
            return f"exit code {self._proc.exitcode}"

    @property
    def op_seq(self) -> int:
        return int(self._ops.value) if self._ops is not None else 0

    @property
    def exitcode(self):
        return self._proc.exitcode if self._proc else None

    def health(self) -> tuple[int, str]:
        """(ExecutorHealth, detail) as seen from outside: a stopped process, or one whose
        liveness thread has not beaten for UNRESPONSIVE_S, is named for what it is."""
        from ringleader.v1 import jobs_pb2 as pb

        if self._proc is None or not self._proc.is_alive():
            return pb.EXECUTOR_STARTING, "not running"
        if process_state(self._proc.pid) in ("T", "t"):
            return pb.EXECUTOR_STOPPED, "process stopped"
        value, since = self._last_beat
        now = time.monotonic()
        if self._beats.value != value:
            self._last_beat = (self._beats.value, now)
        elif now - since > UNRESPONSIVE_S:
            return pb.EXECUTOR_UNRESPONSIVE, f"no sign of life for {now - since:.1f} s"
        return pb.EXECUTOR_OK, ""

    async def reap(self, timeout: float = 5.0):
        """Wait for a dying executor to be reaped, then return its exit code (None if it lives on).

        Its pipe closes a moment before the kernel reports the exit, so the code read right after
        the pipe's EOF can still be None."""
        await self._exited(timeout)
        return self.exitcode

    async def _exited(self, timeout: float) -> None:
        """Wait up to `timeout` for the process to be gone, polling on the loop's thread. Not
        Process.join on a thread: the heartbeat's `health` polls the same process on the loop,
        and two threads reading its exit status from the forkserver's pipe race: the loser
        reads the pipe's end and takes it for a lost forkserver (exit code 255, where the
        executor was killed by signal 9: test_failures.py, once under two test processes)."""
        deadline = time.monotonic() + timeout
        while self._proc is not None and self._proc.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    def send(self, msg) -> None:
        self._conn.send(msg)

    async def kill(self) -> None:
        """Kill at once: a hung NCCL call ignores polite requests."""
        if self._proc and self._proc.is_alive():
            self._proc.kill()
        await self._exited(10)
        if self._reader:
            self._reader.close()  # before the descriptor it watches is closed
        if self._conn:
            self._conn.close()

    async def stop(self) -> None:
        """Ask the executor to leave its process group and exit; kill it if it does not."""
        if self._proc and self._proc.is_alive():
            try:
                self.send(api.Exit())
            except (OSError, ValueError):
                pass
            await asyncio.to_thread(self._proc.join, 10)
        await self.kill()


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat ("R", "S", "T" stopped, ...; "" where unknown)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""



class PipeReader:
    """The executor's messages read by the daemon's loop as they arrive (the loop watches the
    pipe's descriptor), each delivered at once as `deliver(msg)`, then api.Exited at the pipe's end.

    The frames are multiprocessing.Connection's (a 4-byte big-endian length, or -1 and an 8-byte
    one, then the pickle), read here in whatever pieces the pipe gives, so the loop never blocks on
    a message half written (an executor stopped mid-send). A reader thread handing each message to
    the loop (call_soon_threadsafe) cost every message a thread wake-up and a hand-over of the GIL:
    a warm job's Done paid them on its way to the coordinator."""

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop, deliver) -> None:
        self.fd, self.loop, self.deliver = fd, loop, deliver
        self._buf = bytearray()
        self._open = True
        loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except OSError:
            chunk = b""
        if not chunk:
            self.close()
            self.deliver(api.Exited())
            return
        self._buf += chunk
        while self._open and (msg := self._take()) is not None:
            self.deliver(msg)

    def _take(self):
        """The first whole message in the buffer, removed from it (None: not all of it is here)."""
        buf = self._buf
        if len(buf) < 4:
            return None
        size, head = struct.unpack_from("!i", buf)[0], 4
        if size == -1:  # over 2 GiB: the 8-byte length follows
            if len(buf) < 12:
                return None
            size, head = struct.unpack_from("!Q", buf, 4)[0], 12
        if len(buf) < head + size:
            return None
        msg = pickle.loads(buf[head:head + size])
        del buf[:head + size]
        return msg

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self.loop.remove_reader(self.fd)
            except (ValueError, RuntimeError):  # the loop is closed: the daemon is gone
                pass
