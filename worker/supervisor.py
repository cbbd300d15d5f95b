"""The daemon's handle on its executor child: start, talk, kill, notice death."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import threading

READY_TIMEOUT_S = 120  # importing torch and creating a CUDA context can take a while


class ExecutorHandle:
    """One executor process. Its messages arrive on `messages`; death arrives as {"t": "exit"}."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.messages: asyncio.Queue = asyncio.Queue()
        self.counter = None
        self._proc = None
        self._conn = None

    async def start(self) -> dict:
        """Spawn the executor and wait for its device description."""
        from worker import executor

        ctx = mp.get_context("spawn")  # never fork a process that may hold CUDA or gRPC state
        parent, child = ctx.Pipe()
        self.counter = ctx.Value("q", 0, lock=False)  # op sequence number, read for heartbeats
        self._proc = ctx.Process(target=executor.main, args=(child, self.device, self.counter),
                                 name=f"ringleader-executor-{self.device}", daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        self.messages = asyncio.Queue()
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._pump, args=(parent, self.messages, loop), daemon=True).start()
        ready = await asyncio.wait_for(self.messages.get(), READY_TIMEOUT_S)
        if ready.get("t") != "ready":
            raise RuntimeError(f"executor for {self.device} failed to start (exit code {self.exitcode})")
        return ready["device"]

    @staticmethod
    def _pump(conn, queue: asyncio.Queue, loop) -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                loop.call_soon_threadsafe(queue.put_nowait, {"t": "exit"})
                return
            loop.call_soon_threadsafe(queue.put_nowait, msg)

    @property
    def op_seq(self) -> int:
        return int(self.counter.value) if self.counter is not None else 0

    @property
    def exitcode(self):
        return self._proc.exitcode if self._proc else None

    async def reap(self, timeout: float = 5.0):
        """Wait for a dying executor to be reaped, then return its exit code (None if it lives on).

        Its pipe closes a moment before the kernel reports the exit, so the code read right after
        the pipe's EOF can still be None."""
        if self._proc:
            await asyncio.to_thread(self._proc.join, timeout)
        return self.exitcode

    def send(self, msg: dict) -> None:
        self._conn.send(msg)

    async def kill(self) -> None:
        """Kill at once: a hung NCCL call ignores polite requests."""
        if self._proc and self._proc.is_alive():
            self._proc.kill()
        if self._proc:
            await asyncio.to_thread(self._proc.join, 10)
        if self._conn:
            self._conn.close()

    async def stop(self) -> None:
        """Ask the executor to leave its process group and exit; kill it if it does not."""
        if self._proc and self._proc.is_alive():
            try:
                self.send({"t": "exit"})
            except (OSError, ValueError):
                pass
            await asyncio.to_thread(self._proc.join, 10)
        await self.kill()
