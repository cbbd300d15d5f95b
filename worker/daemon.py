"""The worker daemon: one per device, control plane only, supervising one executor process.

It keeps one long-lived stream to the coordinator (reconnecting with backoff), forwards
assignments to its executor and the executor's progress, results and completion back up.
A crashed executor is replaced and the job it ran is reported failed; the daemon lives on.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import random
import socket
import threading
import time
from dataclasses import dataclass

import grpc

from ringleader import __version__
from ringleader.grpc_options import KEEPALIVE_OPTIONS
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from ringleader.v1 import workers_pb2_grpc
from worker.supervisor import ExecutorHandle

log = logging.getLogger("ringleader.worker")

_FAILURES = {"rank": wpb.RANK_ERROR, "peer": wpb.PEER_ERROR}
# A rank's outcome, for the worker's metrics (worker/metrics.py: ringleader_worker_jobs_total).
_OUTCOMES = {wpb.RANK_ERROR: "rank_error", wpb.PEER_ERROR: "peer_error", wpb.EXECUTOR_DIED: "executor_died",
             wpb.ABORTED: "aborted"}



@dataclass
class WorkerConfig:
    coordinator: str
    device: str = "cpu"  # cpu or cuda:N
    worker_id: str = ""
    advertise_host: str = ""  # where peers reach this worker's TCP store; default: the route to the coordinator
    max_backoff_s: float = 5.0


def default_worker_id(device: str) -> str:
    host = socket.gethostname()
    # One daemon per GPU makes cuda ids stable; CPU daemons may share a host, so add the pid.
    return f"{host}-{device.replace(':', '')}" + ("" if device.startswith("cuda") else f"-{os.getpid()}")


def route_to(target: str) -> str:
    """The local address this host uses to reach `target` (host:port): what peers can reach."""
    host = target.rsplit(":", 1)[0].strip("[]")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))  # UDP connect sends nothing; it only picks the route
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Backoff:
    """Exponential backoff with full jitter; reset after a successful connection."""

    def __init__(self, base: float = 0.1, cap: float = 5.0) -> None:
        self.base, self.cap, self.attempt = base, cap, 0

    def next_delay(self) -> float:
        self.attempt += 1
        return random.uniform(0, min(self.cap, self.base * 2 ** self.attempt))

    def reset(self) -> None:
        self.attempt = 0


class WorkerDaemon:
    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.worker_id = config.worker_id or default_worker_id(config.device)
        self.advertise = config.advertise_host or route_to(config.coordinator)
        self.executor = ExecutorHandle(config.device)
        self.device: dict = {}
        self.job: tuple[str, int] | None = None  # (job_id, rank) the executor is running
        self.warm_group = ""
        self.restarts = 0
        # For metrics, read from the metrics server's thread: ranks ended by outcome, and the ops
        # of executors already replaced (a new executor's op counter starts again at 0).
        self.jobs_done = dict.fromkeys(["succeeded", *_OUTCOMES.values(), "failed"], 0)
        self.ops_retired = 0
        self._stats_lock = threading.Lock()
        self.heartbeat_s = 1.0
        self.loop_alive_at = time.monotonic()  # stamped by _tick; worker/health.py's liveness
        self.connected = asyncio.Event()
        # Messages for the coordinator survive reconnects; a failed write goes back to the front.
        self._outbox: collections.deque[wpb.WorkerMessage] = collections.deque()
        self._outbox_ready = asyncio.Event()
        self._executor_lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._session_task: asyncio.Task | None = None

    async def run(self) -> None:
        self._ticker = asyncio.create_task(self._tick())  # held: the loop keeps only weak references
        self.device = await self.executor.start()
        pump = asyncio.create_task(self._pump_executor())
        backoff = Backoff(cap=self.config.max_backoff_s)
        try:
            while not self._stopping.is_set():
                self._session_task = asyncio.create_task(self._session(backoff))
                try:
                    await self._session_task
                except asyncio.CancelledError:
                    if not self._stopping.is_set():
                        raise
                except grpc.aio.AioRpcError as exc:
                    if exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                        log.warning("%s", exc.details())
                    else:
                        log.info("coordinator %s unreachable (%s)", self.config.coordinator, exc.code().name)
                self.connected.clear()
                try:
                    await asyncio.wait_for(self._stopping.wait(), backoff.next_delay())
                except TimeoutError:
                    pass
        finally:
            pump.cancel()
            await self.executor.stop()

    async def _tick(self) -> None:
        while not self._stopping.is_set():
            self.loop_alive_at = time.monotonic()
            await asyncio.sleep(1.0)

    def stop(self) -> None:
        """Leave the coordinator and stop the executor (what a first SIGTERM does)."""
        self._stopping.set()
        if self._session_task:
            self._session_task.cancel()

    # ---- the coordinator stream ------------------------------------------------------------

    async def _session(self, backoff: Backoff) -> None:
        async with grpc.aio.insecure_channel(self.config.coordinator, options=KEEPALIVE_OPTIONS) as channel:
            call = workers_pb2_grpc.WorkerServiceStub(channel).Connect()
            await call.write(wpb.WorkerMessage(register=self._register_message()))
            first = await call.read()
            if first is grpc.aio.EOF:
                return
            self.heartbeat_s = first.registered.heartbeat_interval_s or self.heartbeat_s
            backoff.reset()
            self.connected.set()
            log.info("worker %s registered with %s", self.worker_id, self.config.coordinator)
            tasks = [asyncio.create_task(t) for t in (self._read(call), self._write(call), self._heartbeat())]
            try:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    if t.exception():
                        raise t.exception()
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                call.cancel()

    def _register_message(self) -> wpb.Register:
        d = self.device
        job_id, rank = self.job or ("", 0)
        return wpb.Register(
            worker_id=self.worker_id, host=socket.gethostname(), address=self.advertise,
            device=pb.Device(type=d["type"], index=d["index"], name=d["name"], uuid=d["uuid"],
                             memory_bytes=d["memory_bytes"]),
            backend=d["backend"], store_port=free_port(self.advertise), running_job_id=job_id,
            running_rank=rank, warm_group=self.warm_group, executor_restarts=self.restarts,
            version=__version__)

    async def _read(self, call) -> None:
        while True:
            msg = await call.read()
            if msg is grpc.aio.EOF:
                return
            kind = msg.WhichOneof("msg")
            if kind == "assignment":
                await self._assign(msg.assignment)
            elif kind == "abort":
                await self._abort(msg.abort)

    async def _write(self, call) -> None:
        while True:
            await self._outbox_ready.wait()
            while self._outbox:
                msg = self._outbox.popleft()
                try:
                    await call.write(msg)
                except BaseException:
                    self._outbox.appendleft(msg)
                    raise
            self._outbox_ready.clear()

    async def _heartbeat(self) -> None:
        while True:
            job_id = self.job[0] if self.job else ""
            self._send(wpb.WorkerMessage(heartbeat=wpb.Heartbeat(job_id=job_id, op_seq=self.executor.op_seq)))
            await asyncio.sleep(self.heartbeat_s)

    def _send(self, msg: wpb.WorkerMessage) -> None:
        if msg.WhichOneof("msg") == "heartbeat" and not self.connected.is_set():
            return  # stale heartbeats are worthless after a reconnect
        self._outbox.append(msg)
        self._outbox_ready.set()

    # ---- the executor ----------------------------------------------------------------------

    async def _assign(self, a: wpb.Assignment) -> None:
        async with self._executor_lock:
            if self.job:
                # The coordinator placed us twice: refuse the new job rather than corrupt the old.
                self._send_done(a.job_id, a.rank, ok=False, error=f"worker busy with job {self.job[0]}",
                                failure=wpb.RANK_ERROR)
                return
            self.job = (a.job_id, a.rank)
            self.executor.send({"t": "run", "assignment": a.SerializeToString()})

    async def _abort(self, abort: wpb.Abort) -> None:
        async with self._executor_lock:
            if not self.job or self.job[0] != abort.job_id:
                return
            job_id, rank = self.job
            log.warning("aborting job %s: %s", job_id, abort.reason)
            # The group may be mid-collective with a dead peer: only a new process is safe.
            await self._replace_executor()
            self.job = None
            self._send_done(job_id, rank, ok=False, error=f"aborted: {abort.reason}", failure=wpb.ABORTED)

    def ops_run(self) -> int:
        """Collective ops run by all of this daemon's executors so far."""
        with self._stats_lock:
            return self.ops_retired + self.executor.op_seq

    async def _replace_executor(self) -> None:
        await self.executor.kill()
        with self._stats_lock:  # one step for a reader on another thread: no ops lost or counted twice
            self.ops_retired += self.executor.op_seq
            self.executor = ExecutorHandle(self.config.device)
        self.warm_group = ""
        self.restarts += 1
        self.device = await self.executor.start()

    async def _pump_executor(self) -> None:
        while True:
            executor = self.executor
            msg = await executor.messages.get()
            if executor is not self.executor:
                continue  # a message from an executor that was already replaced
            t = msg["t"]
            if t == "progress" and self.job:
                self._send(wpb.WorkerMessage(progress=wpb.ProgressReport(
                    job_id=msg["job_id"], rank=self.job[1],
                    progress=pb.Progress(done=msg["done"], total=msg["total"], size_bytes=msg["size_bytes"]))))
            elif t == "result":
                self._send(wpb.WorkerMessage(result=wpb.ResultReport(
                    job_id=msg["job_id"], result=pb.SizeResult(**msg["result"]))))
            elif t == "done" and self.job and self.job[0] == msg["job_id"]:
                rank = self.job[1]
                self.job = None
                self.warm_group = msg["warm_group"]
                self._send_done(msg["job_id"], rank, ok=msg["ok"], error=msg["error"],
                                failure=_FAILURES.get(msg["failure"], 0), warm_start=msg["warm_start"],
                                results=[pb.SizeResult(**r) for r in msg["results"]],
                                outcome=msg.get("outcome"))
            elif t == "exit":
                await self._on_executor_death(executor)

    async def _on_executor_death(self, executor: ExecutorHandle) -> None:
        async with self._executor_lock:
            if executor is not self.executor or self._stopping.is_set():
                return
            code = await executor.reap()
            why = f"executor process died (exit code {code})" if code is None or code >= 0 else \
                f"executor process killed by signal {-code}"
            log.error("%s", why)
            job = self.job
            await self._replace_executor()
            self.job = None
            if job:
                self._send_done(job[0], job[1], ok=False, error=why, failure=wpb.EXECUTOR_DIED)

    def _send_done(self, job_id: str, rank: int, *, ok: bool, error: str = "", failure: int = 0,
                   warm_start: bool = False, results: list | None = None,
                   outcome: tuple[str, bytes] | None = None) -> None:
        self.jobs_done["succeeded" if ok else _OUTCOMES.get(failure, "failed")] += 1
        done = wpb.JobDone(
            job_id=job_id, rank=rank, ok=ok, error=error, failure=failure, warm_group=self.warm_group,
            store_port=free_port(self.advertise), warm_start=warm_start,
            executor_restarts=self.restarts, results=results or [])
        if outcome:  # (kind, serialized message) of a non-collective job, from rank 0's executor
            getattr(done, outcome[0]).ParseFromString(outcome[1])
        self._send(wpb.WorkerMessage(done=done))


async def run_daemons(configs: list[WorkerConfig], metrics=None) -> None:
    """Run one daemon per device in this process until SIGINT/SIGTERM; `metrics` (a started
    worker.metrics.WorkerMetrics) serves their metrics."""
    import signal

    daemons = [WorkerDaemon(c) for c in configs]
    if metrics is not None:
        metrics.add(daemons)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: [d.stop() for d in daemons])
    await asyncio.gather(*(d.run() for d in daemons))
