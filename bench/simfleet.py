"""Simulated worker daemons: the real WorkerService protocol over real gRPC streams, without
executors, so one process can stand in for thousands of daemons (a fake only of the daemon's
executor side, which cannot run thousands of times on one machine).

Each simulated daemon does what worker/daemon.py does, after a short delay instead of the work:
register; heartbeat at the interval the coordinator asks for; on an Assignment, rank 0 of a new
group reports StoreReady first (the other ranks are assigned only then), then progress, one
result per size (rank 0) and JobDone carrying the group it now holds (warm_group); DropGroup is
answered with GroupDropped; Abort with a failed JobDone. A stream the coordinator ends is
counted in `dropped` (one that fails, in `failed`) and reconnected after a second or two, as a
daemon would.

Used by bench/control_plane.py (SimFleet: processes of PER_PROCESS daemons, in which a job
named "hold" runs until aborted and the others for 0.2-1 s) and by tests that need CUDA/NCCL
workers on a machine without GPUs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import multiprocessing as mp
import random
from dataclasses import dataclass, field
from typing import Callable

import grpc

from bench import loadstats
from ringleader import __version__
from ringleader.grpc_options import KEEPALIVE_OPTIONS
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from ringleader.v1 import workers_pb2_grpc

STORE_PORT = 29500  # what rank 0 "bound": nothing connects to it
GPU = ("cuda", "nccl", "NVIDIA H100 80GB HBM3", 80 << 30)
CPU = ("cpu", "gloo", "simulated CPU", 64 << 30)


# The per-worker secret the coordinator issued at each id's first registration, presented on every
# later one, as a daemon keeps it under --state-dir: a simulated worker that comes back is the same.
SECRETS: dict[str, str] = {}


@dataclass(frozen=True)
class SimSpec:
    worker_id: str
    host: str
    index: int
    device: tuple[str, str, str, int] = CPU  # type, backend, name, memory

    def register(self, holds: str = "") -> wpb.Register:
        dtype, backend, name, memory = self.device
        return wpb.Register(worker_id=self.worker_id, host=self.host, address="127.0.0.1", backend=backend,
                            device=pb.Device(type=dtype, index=self.index, name=name, memory_bytes=memory),
                            warm_group=holds, version=__version__, worker_secret=SECRETS.get(self.worker_id, ""))


@dataclass
class Stats:
    registered: int = 0
    heartbeats: int = 0
    assignments: int = 0
    done: int = 0
    dropped: int = 0  # streams the coordinator ended (e.g. a worker it declared lost)
    refused: int = 0  # registrations refused (ALREADY_EXISTS while the old stream is noticed)
    failed: int = 0  # streams that failed to open or broke (UNAVAILABLE, ...)

    def add(self, other: "Stats") -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def fleet_specs(n: int, per_host: int = 8, gpu_hosts: float = 0.5, prefix: str = "sim") -> list[SimSpec]:
    """`n` daemons, `per_host` per host; the first `gpu_hosts` share of hosts have GPUs."""
    hosts = (n + per_host - 1) // per_host
    return [SimSpec(f"{prefix}-h{i // per_host:04}-d{i % per_host}", f"{prefix}-h{i // per_host:04}", i % per_host,
                    GPU if i // per_host < hosts * gpu_hosts else CPU) for i in range(n)]


@dataclass
class SimWorker:
    stub: workers_pb2_grpc.WorkerServiceStub
    spec: SimSpec
    stats: Stats
    job_s: Callable[[wpb.Assignment], float] = lambda a: 0.2  # how long a job "runs"; inf: until aborted
    ack_s: float = 0.005  # before StoreReady, as a real rank 0 binds its store
    holds: str = ""
    job: tuple[str, int] | None = None
    _run: asyncio.Task | None = None
    _out: asyncio.Queue = field(default_factory=asyncio.Queue)
    _op: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Stay registered until `stop`, reconnecting (after 1-2 s) when the stream ends."""
        while not stop.is_set():
            try:
                if await self._session(stop):
                    self.stats.dropped += 1
            except grpc.aio.AioRpcError as exc:  # as a daemon's link: count, then reconnect
                if exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                    self.stats.refused += 1
                else:
                    self.stats.failed += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), random.uniform(1.0, 2.0))

    async def _session(self, stop: asyncio.Event) -> bool:
        call = self.stub.Connect()
        await call.write(wpb.WorkerMessage(register=self.spec.register(self.holds)))
        first = await call.read()
        if first is grpc.aio.EOF:
            return True
        self.stats.registered += 1
        if first.registered.worker_secret:
            SECRETS[self.spec.worker_id] = first.registered.worker_secret
        interval = first.registered.heartbeat_interval_s or 1.0
        tasks = [asyncio.create_task(t) for t in (self._read(call), self._write(call), self._beat(interval))]
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait([*tasks, stopping], return_when=asyncio.FIRST_COMPLETED)
            return not stop.is_set()
        finally:
            for t in (*tasks, stopping, self._run):
                if t:
                    t.cancel()
            await asyncio.gather(*tasks, stopping, return_exceptions=True)
            call.cancel()
            self.job, self._run = None, None

    def send(self, **msg) -> None:
        self._out.put_nowait(wpb.WorkerMessage(**msg))

    async def _write(self, call) -> None:
        while True:
            await call.write(await self._out.get())

    async def _beat(self, interval: float) -> None:
        await asyncio.sleep(random.uniform(0, interval))  # daemons do not beat in step
        while True:
            job_id = self.job[0] if self.job else ""
            self.send(heartbeat=wpb.Heartbeat(job_id=job_id, op_seq=self._op, executor=pb.EXECUTOR_OK))
            self.stats.heartbeats += 1
            await asyncio.sleep(interval)

    async def _read(self, call) -> None:
        while (msg := await call.read()) is not grpc.aio.EOF:
            kind = msg.WhichOneof("msg")
            if kind == "assignment":
                self.stats.assignments += 1
                self.job = (msg.assignment.job_id, msg.assignment.rank)
                self._run = asyncio.create_task(self._job(msg.assignment))
            elif kind == "abort":
                self._abort(msg.abort)
            elif kind == "drop_group" and not self.job:
                if self.holds == msg.drop_group.group_key:
                    self.holds = ""
                self.send(group_dropped=wpb.GroupDropped(group_key=msg.drop_group.group_key))

    async def _job(self, a: wpb.Assignment) -> None:
        if a.rank == 0 and not a.store_port and a.group_key != self.holds:
            await asyncio.sleep(self.ack_s)
            self.send(store_ready=wpb.StoreReady(job_id=a.job_id, group_key=a.group_key, store_port=STORE_PORT))
        duration = self.job_s(a)
        # An endless job (a benchmark holding its worker) waits until it is aborted.
        await (asyncio.sleep(duration) if math.isfinite(duration) else asyncio.get_running_loop().create_future())
        self._op += 1
        results = _results(a) if a.rank == 0 else []
        if results:
            self.send(progress=wpb.ProgressReport(job_id=a.job_id, rank=0, progress=pb.Progress(
                done=len(results), total=len(results))))
            for r in results:
                self.send(result=wpb.ResultReport(job_id=a.job_id, result=r))
        warm = a.group_key == self.holds
        self.holds, self.job, self._run = a.group_key, None, None
        self.stats.done += 1
        self.send(done=wpb.JobDone(job_id=a.job_id, rank=a.rank, ok=True, warm_group=self.holds, warm_start=warm,
                                   results=results))

    def _abort(self, abort: wpb.Abort) -> None:
        if self.job and self.job[0] == abort.job_id:
            rank = self.job[1]
            if self._run:
                self._run.cancel()
            self.holds, self.job, self._run = "", None, None  # a daemon replaces its executor
            self.send(done=wpb.JobDone(job_id=abort.job_id, rank=rank, ok=False, error=f"aborted: {abort.reason}",
                                       failure=wpb.ABORTED))
        else:
            self.send(done=wpb.JobDone(job_id=abort.job_id, ok=False, error="aborted: not running it",
                                       failure=wpb.ABORTED, warm_group=self.holds))


def _results(a: wpb.Assignment) -> list[pb.SizeResult]:
    c = a.spec.collective
    if a.spec.WhichOneof("kind") != "collective":
        return []
    return [pb.SizeResult(op=c.op, dtype=c.dtype, reduce_op=c.reduce_op, size_bytes=s, count=s // 4, time_us=50.0,
                          algbw_gbps=s / 50e3, busbw_gbps=s / 50e3, world_size=a.world_size, iters=c.iters)
            for s in c.sizes]


def channels(address: str, n: int) -> list[grpc.aio.Channel]:
    """`n` channels of their own connection each (a distinct argument keeps gRPC from sharing one)."""
    return [grpc.aio.insecure_channel(address, options=[*KEEPALIVE_OPTIONS, ("ringleader.sim_channel", i)])
            for i in range(n)]


async def run_fleet(address: str, specs: list[SimSpec], stop: asyncio.Event, stats: Stats,
                    job_s: Callable[[wpb.Assignment], float] = lambda a: 0.2, per_channel: int = 100) -> None:
    """Run simulated daemons for `specs` until `stop` (about `per_channel` streams per connection)."""
    chans = channels(address, max(1, (len(specs) + per_channel - 1) // per_channel))
    try:
        workers = [SimWorker(workers_pb2_grpc.WorkerServiceStub(chans[i % len(chans)]), s, stats, job_s)
                   for i, s in enumerate(specs)]
        await asyncio.gather(*(w.run(stop) for w in workers))
    finally:
        await asyncio.gather(*(c.close() for c in chans))


# ---- many daemons, in processes of their own --------------------------------------------------

PER_PROCESS = 1000  # simulated daemons per process


def _sim_process(address: str, start: int, stop_at: int, total: int, pipe) -> None:
    specs = fleet_specs(total)[start:stop_at]

    def job_s(a) -> float:  # the benchmark's endless jobs hold their worker
        return float("inf") if a.spec.name == "hold" else random.uniform(0.2, 1.0)

    async def main() -> None:
        stop, stats = asyncio.Event(), Stats()

        def on_command() -> None:
            command = pipe.recv()
            if command == "stop":
                stop.set()
            else:
                pipe.send(dataclasses.asdict(stats))

        asyncio.get_running_loop().add_reader(pipe.fileno(), on_command)
        await run_fleet(address, specs, stop, stats, job_s)
        pipe.send(dataclasses.asdict(stats))

    asyncio.run(main())


class SimFleet:
    def __init__(self, address: str, n: int) -> None:
        ctx = mp.get_context("spawn")
        self.pipes, self.procs = [], []
        for start in range(0, n, PER_PROCESS):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_sim_process, args=(address, start, min(n, start + PER_PROCESS), n, child),
                            daemon=True)
            p.start()
            self.pipes.append(parent)
            self.procs.append(p)

    def stats(self) -> Stats:
        total = Stats()
        for pipe in self.pipes:
            pipe.send("stats")
        for pipe in self.pipes:
            total.add(Stats(**pipe.recv()))
        return total

    def cpu_s(self) -> float:
        return sum(loadstats.cpu_seconds(p.pid) for p in self.procs)

    def stop(self) -> Stats:
        for pipe in self.pipes:
            pipe.send("stop")
        total = Stats()
        for pipe, proc in zip(self.pipes, self.procs):
            if pipe.poll(60):
                total.add(Stats(**pipe.recv()))
            proc.join(10)
            if proc.is_alive():
                proc.kill()
        return total
