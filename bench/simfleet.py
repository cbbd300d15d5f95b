"""Simulated worker daemons: the real WorkerService protocol over real gRPC streams, without
executors, so one process can stand in for thousands of daemons (a fake only of the daemon's
executor side, which cannot run thousands of times on one machine).

Each simulated daemon does what worker/daemon.py and its executor (worker/executor.py) do, with
a short delay instead of the work: register (reconnecting with the job it still runs and the
group it holds); heartbeat at the interval the coordinator asks for, carrying its executor's op
counter; on an Assignment of a new group, rank 0 binds the store and reports StoreReady (the
other ranks are assigned only then) and every rank "initialises" the group; then it runs the
ops, and the counter grows by one per op (what tells the coordinator the group formed: an op
past the counter's value at assignment); a collective sweep reports progress and one result
per size (rank 0), check kinds every rank's own evidence, and JobDone carries the group the executor now
holds (warm_group). A job that never ends (a benchmark holding its worker) keeps running ops, as
a real long job does, so neither its rendezvous nor its op deadline fails it. DropGroup is
answered with GroupDropped; Abort with a failed JobDone. A stream the coordinator ends is
counted in `dropped` (one that fails, in `failed`) and reconnected after a second or two, as a
daemon would. tests/integration/test_scale.py runs it against the real coordinator, so it cannot
drift from the protocol unseen.

Used by bench/control_plane.py (SimFleet: processes of PER_PROCESS daemons, in which a job
named "hold" runs until aborted and the others for 0.2-1 s) and by tests that need CUDA/NCCL
workers on a machine without GPUs.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import math
import multiprocessing as mp
import random
from dataclasses import dataclass, field
from typing import Callable

import grpc

from bench import loadstats
from ringleader import __version__, roundrobin
from ringleader.grpc_options import KEEPALIVE_OPTIONS
from ringleader.security import with_port
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

    def register(self, holds: str = "", job: tuple[str, int] | None = None) -> wpb.Register:
        dtype, backend, name, memory = self.device
        job_id, rank = job or ("", 0)
        return wpb.Register(worker_id=self.worker_id, host=self.host, address="127.0.0.1", backend=backend,
                            device=pb.Device(type=dtype, index=self.index, name=name, memory_bytes=memory),
                            warm_group=holds, version=__version__, worker_secret=SECRETS.get(self.worker_id, ""),
                            running_job_id=job_id, running_rank=rank)


@dataclass
class Stats:
    registered: int = 0
    heartbeats: int = 0
    assignments: int = 0
    done: int = 0
    dropped: int = 0  # streams the coordinator ended (e.g. a worker it declared lost)
    refused: int = 0  # registrations refused (ALREADY_EXISTS while the old stream is noticed)
    failed: int = 0  # streams that failed to open or broke (UNAVAILABLE, ...)
    moved: int = 0  # streams the coordinator moved to its worker relay (Registered.move_to_port)

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
    init_s: float = 0.01  # forming a new group (init_process_group)
    op_s: float = 0.5  # a job that runs until aborted: one op this often
    holds: str = ""
    job: tuple[str, int] | None = None
    connected: bool = False
    _run: asyncio.Task | None = None
    # What the daemon sends, kept across reconnects as worker/link.py keeps its outbox.
    _out: collections.deque = field(default_factory=collections.deque)
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    _op: int = 0  # the executor's op counter (worker/supervisor.py op_seq)
    _kept: wpb.WorkerMessage | None = None  # the last Done of a job it ran: sent again on each stream (worker/link.py)
    address: str = ""  # the coordinator's, as given (where a move to its relay is resolved)
    moved: workers_pb2_grpc.WorkerServiceStub | None = None  # its worker relay's, once moved there (worker/link.py)

    async def run(self, stop: asyncio.Event) -> None:
        """Stay registered until `stop`, reconnecting (after 1-2 s) when the stream ends."""
        try:
            while not stop.is_set():
                try:
                    if await self._session(stop):
                        self.stats.dropped += 1
                except Moved:
                    continue  # dial the relay now, as worker/link.py does
                except grpc.aio.AioRpcError as exc:  # as a daemon's link: count, then reconnect
                    self.moved = None  # the relay failed: back to the address given
                    if exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                        self.stats.refused += 1
                    else:
                        self.stats.failed += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), random.uniform(1.0, 2.0))
        finally:
            if self._run:  # the daemon stops: so does its executor
                self._run.cancel()

    async def _session(self, stop: asyncio.Event) -> bool:
        call = (self.moved or self.stub).Connect()
        try:
            # A job keeps running while the stream is down (the executor is the daemon's child):
            # the daemon says so when it registers again, as worker/daemon.py does; or names the
            # job of its kept Done, sent again first (worker/link.py).
            kept = self._kept
            if kept is not None:
                kept.done.warm_group = self.holds  # as of now, as the Register says (worker/link.py)
                if not any(m is kept for m in self._out):
                    self._out.appendleft(kept)
            job = self.job or (kept and (kept.done.job_id, kept.done.rank))
            await call.write(wpb.WorkerMessage(register=self.spec.register(self.holds, job)))
            first = await call.read()
            if first is grpc.aio.EOF:
                self.moved = None
                return True
            if first.registered.move_to_port:
                self.stats.moved += 1
                self.moved = workers_pb2_grpc.WorkerServiceStub(
                    relay_channel(with_port(self.address, first.registered.move_to_port)))
                raise Moved()
            self.stats.registered += 1
            if first.registered.worker_secret:
                SECRETS[self.spec.worker_id] = first.registered.worker_secret
            interval = first.registered.heartbeat_interval_s or 1.0
            self.connected = True
            tasks = [asyncio.create_task(t) for t in (self._read(call), self._write(call), self._beat(interval))]
            stopping = asyncio.create_task(stop.wait())
            try:
                await asyncio.wait([*tasks, stopping], return_when=asyncio.FIRST_COMPLETED)
                return not stop.is_set()
            finally:
                self.connected = False
                for t in (*tasks, stopping):
                    t.cancel()
                await asyncio.gather(*tasks, stopping, return_exceptions=True)
        finally:
            call.cancel()

    def send(self, kept: bool = False, **msg) -> None:
        if "heartbeat" in msg and not self.connected:
            return  # stale heartbeats are worthless after a reconnect (worker/link.py)
        self._out.append(out := wpb.WorkerMessage(**msg))
        if kept:
            self._kept = out
        self._ready.set()

    async def _write(self, call) -> None:
        while True:
            await self._ready.wait()
            while self._out:
                msg = self._out.popleft()
                try:
                    await call.write(msg)
                except BaseException:
                    self._out.appendleft(msg)  # sent on the next stream, as the daemon's link does
                    raise
            self._ready.clear()

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
                self._assign(msg.assignment)
            elif kind == "abort":
                self._abort(msg.abort)
            elif kind == "drop_group" and not self.job:
                if self.holds == msg.drop_group.group_key:
                    self.holds = ""
                self.send(group_dropped=wpb.GroupDropped(group_key=msg.drop_group.group_key))

    def _assign(self, a: wpb.Assignment) -> None:
        if self.job:  # placed wrongly: refuse the new job rather than corrupt the old (worker/daemon.py)
            self.send(done=wpb.JobDone(job_id=a.job_id, rank=a.rank, ok=False, failure=wpb.RANK_ERROR,
                                       error=f"worker busy with job {self.job[0]}", warm_group=self.holds))
            return
        self.stats.assignments += 1
        self.job, self._kept = (a.job_id, a.rank), None
        self._run = asyncio.create_task(self._job(a))

    async def _job(self, a: wpb.Assignment) -> None:
        warm = bool(a.group_key) and a.group_key == self.holds
        if not warm:  # worker/executor.py _init_group: the old group goes, rank 0 binds the store first
            self.holds = ""
            if a.rank == 0:
                await asyncio.sleep(self.ack_s)
                self.send(store_ready=wpb.StoreReady(job_id=a.job_id, group_key=a.group_key, store_port=STORE_PORT))
            await asyncio.sleep(self.init_s)
        self.holds = a.group_key
        duration = self.job_s(a)
        if not math.isfinite(duration):
            while True:  # a job that never ends still runs ops: its group formed and it progresses
                self._op += 1
                await asyncio.sleep(self.op_s)
        results = await self._sweep(a, duration)
        self.job, self._run = None, None
        self.stats.done += 1
        done = wpb.JobDone(job_id=a.job_id, rank=a.rank, ok=True, warm_group=self.holds, warm_start=warm,
                           results=results if a.rank == 0 else [])
        if (evidence := _evidence(a, self.spec.device[2])) is not None:
            getattr(done, evidence[0]).CopyFrom(evidence[1])
        self.send(done=done, kept=True)

    async def _sweep(self, a: wpb.Assignment, duration: float) -> list[pb.SizeResult]:
        """The job's steps over `duration`: ops, progress (every rank), result rows (rank 0)."""
        rows = _results(a)
        steps = max(1, len(rows))
        for i in range(steps):
            await asyncio.sleep(duration / steps)
            self._op += max(1, a.spec.collective.iters + a.spec.collective.warmup)
            self.send(progress=wpb.ProgressReport(job_id=a.job_id, rank=a.rank, progress=pb.Progress(
                done=i + 1, total=steps, size_bytes=rows[i].size_bytes if rows else 0)))
            if rows and a.rank == 0:
                self.send(result=wpb.ResultReport(job_id=a.job_id, result=rows[i]))
        return rows

    def _abort(self, abort: wpb.Abort) -> None:
        if self.job and self.job[0] == abort.job_id:
            rank = self.job[1]
            if self._run:
                self._run.cancel()
            # A daemon replaces its executor: the group and the op counter go with it.
            self.holds, self.job, self._run, self._op = "", None, None, 0
            self.send(done=wpb.JobDone(job_id=abort.job_id, rank=rank, ok=False, error=f"aborted: {abort.reason}",
                                       failure=wpb.ABORTED, executor_restarts=1), kept=True)
        elif not (self._kept and self._kept.done.job_id == abort.job_id):  # the kept Done answered it
            self.send(done=wpb.JobDone(job_id=abort.job_id, ok=False, error="aborted: not running it",
                                       failure=wpb.ABORTED, warm_group=self.holds))


def _results(a: wpb.Assignment) -> list[pb.SizeResult]:
    c = a.spec.collective
    if a.spec.WhichOneof("kind") != "collective":
        return []
    return [pb.SizeResult(op=c.op, dtype=c.dtype, reduce_op=c.reduce_op, size_bytes=s, count=s // 4, time_us=50.0,
                          algbw_gbps=s / 50e3, busbw_gbps=s / 50e3, world_size=a.world_size, iters=c.iters)
            for s in c.sizes]


def _evidence(a: wpb.Assignment, model: str) -> tuple[str, object] | None:
    """A rank's own evidence of a check (JobDone's h49e_evidence member): every rank clean and alike
    (a simulated fleet has no faults), each on its own device, so all in one turn."""
    kind, n = a.spec.WhichOneof("kind"), a.world_size
    if kind == "gpu_check":
        # What a sound GPU of the registered model reads (0.8 of its dense bf16 peak, 0.7 of its
        # HBM bandwidth: what an H100 SXM's check reads), above the shipped floors: a healthy
        # simulated fleet judged against what its hardware should do stays HEALTHY.
        return "h49e_gpu", wpb.H49eGpuEvidence(device=model, tflops=790.0, copy_gbps=2350.0, seen_s=[0.001], series=1)
    if kind == "sdc_check":
        return "h49e_sdc", wpb.H49eSdcEvidence(device=model, checksum="00", wrong_from=[0] * n)
    if kind == "link_matrix":
        size, iters = a.spec.link_matrix.size_bytes or 1 << 19, a.spec.link_matrix.iters or 1
        links = [(x, y) for pairs in roundrobin.rounds(n) for x, y in pairs]
        ends = [wpb.H49eLinkEnd(link=k, size_bytes=size, fastest_us=100.0, total_us=100.0 * iters)
                for k, link in enumerate(links) if a.rank in link]
        return "h49e_link", wpb.H49eLinkEvidence(size_reason="simulated", passes=[wpb.H49eLinkPass(iters=iters,
                                                                                                 ends=ends)])
    return None


class Moved(Exception):
    """The coordinator moved the stream to its worker relay."""


_RELAY_CHANNELS: dict[str, list[grpc.aio.Channel]] = {}
_RELAY_STREAMS: dict[str, int] = {}


def relay_channel(address: str, per_channel: int = 100) -> grpc.aio.Channel:
    """A channel to the relay at `address`, about `per_channel` streams a connection (as run_fleet's)."""
    chans = _RELAY_CHANNELS.setdefault(address, [])
    n = _RELAY_STREAMS[address] = _RELAY_STREAMS.get(address, 0) + 1
    if len(chans) * per_channel < n:
        chans.extend(channels(address, 1, salt=len(chans) + 10_000))
    return chans[(n - 1) % len(chans)]


def channels(address: str, n: int, salt: int = 0) -> list[grpc.aio.Channel]:
    """`n` channels of their own connection each (a distinct argument keeps gRPC from sharing one)."""
    return [grpc.aio.insecure_channel(address, options=[*KEEPALIVE_OPTIONS, ("ringleader.sim_channel", salt + i)])
            for i in range(n)]


async def run_fleet(address: str, specs: list[SimSpec], stop: asyncio.Event, stats: Stats,
                    job_s: Callable[[wpb.Assignment], float] = lambda a: 0.2, per_channel: int = 100) -> None:
    """Run simulated daemons for `specs` until `stop` (about `per_channel` streams per connection)."""
    chans = channels(address, max(1, (len(specs) + per_channel - 1) // per_channel))
    try:
        workers = [SimWorker(workers_pb2_grpc.WorkerServiceStub(chans[i % len(chans)]), s, stats, job_s,
                             address=address) for i, s in enumerate(specs)]
        await asyncio.gather(*(w.run(stop) for w in workers))
    finally:
        await asyncio.gather(*(c.close() for c in [*chans, *(c for cs in _RELAY_CHANNELS.values() for c in cs)]))


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
