"""The worker daemon: one per device, control plane only, supervising one executor process.

It keeps one long-lived stream to the coordinator (reconnecting with backoff), forwards
assignments, aborts and group drops to its executor, and the executor's reports back up. It
never exits on an error of its own: every failure ends with the job failed and a reason, the
executor replaced if needed, and the daemon idle and connected. Only a signal ends it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from dataclasses import dataclass, field

from ringleader import __version__
from ringleader.leader import addresses
from ringleader.security import ClientSecurity
from ringleader.signals import unless_set
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from worker import api, fingerprint, telemetry
from worker.credential import WorkerSecret, read_token
from worker.ids import default_worker_id
from worker.link import Backoff, CoordinatorLink
from worker.netif import route_to
from worker.ranklogs import RankLogs
from worker.supervisor import ExecutorHandle, ExecutorStartError

log = logging.getLogger("ringleader.worker")

# A rank's outcome, for the worker's metrics (worker/metrics.py: ringleader_worker_jobs_total).
_OUTCOMES = {wpb.RANK_ERROR: "rank_error", wpb.PEER_ERROR: "peer_error", wpb.EXECUTOR_DIED: "executor_died",
             wpb.ABORTED: "aborted"}
DROP_TIMEOUT_S = 10.0  # an executor that takes longer to drop a group is replaced instead


@dataclass
class WorkerConfig:
    coordinator: str
    device: str = "cpu"  # cpu or cuda:N
    worker_id: str = ""
    advertise_host: str = ""  # where peers reach this worker's TCP store; default: the route to the coordinator
    reconnect_max: float = 5.0  # seconds: the reconnect backoff's cap (--reconnect-max)
    security: ClientSecurity = field(default_factory=ClientSecurity)  # the workers' token, TLS
    state_dir: str = ""  # where this worker keeps its credential across restarts (worker/credential.py)
    host_name: str = ""  # the host it registers with; default: socket.gethostname() (in Kubernetes: the node)
    k8s_token_file: str = ""  # the pod's ServiceAccount token, which vouches for its node's ids (worker/credential.py)


class WorkerDaemon:
    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.worker_id = config.worker_id or default_worker_id(config.device, config.host_name)
        self.advertise = config.advertise_host or route_to(addresses(config.coordinator)[0])
        self.executor: ExecutorHandle | None = None
        self.device: api.DeviceInfo | None = None
        self.job: tuple[str, int] | None = None  # (job_id, rank) the executor is running
        self.holds = ""  # the process group the executor holds
        self.restarts = 0
        # For metrics, read from the metrics server's thread: ranks ended by outcome, and the ops
        # of executors already replaced (a new executor's op counter starts again at 0).
        self.jobs_done = dict.fromkeys(["succeeded", *_OUTCOMES.values(), "failed"], 0)
        self.ops_retired = 0
        self._stats_lock = threading.Lock()
        self.link = CoordinatorLink(config.coordinator, self.worker_id, self.register_message,
                                    self.heartbeat_message, self.on_coordinator, config.reconnect_max,
                                    config.security, WorkerSecret(self.worker_id, config.state_dir))
        self.loop_alive_at = time.monotonic()  # stamped by _tick; worker/health.py's liveness
        self._lock = asyncio.Lock()  # one executor operation at a time
        self._drops: dict[str, asyncio.Future] = {}
        self._stopping = asyncio.Event()
        self.logs = RankLogs()  # where executors capture each rank's stderr
        self._replacing: asyncio.Task | None = None  # held: the loop keeps only weak references
        self.telemetry: telemetry.Telemetry | None = None  # NVML readings, sent with each heartbeat
        # (job id, store port or 0 while binding, executor op counter at the assignment): rank 0
        # of a new group; while no op has run since, a Register says so (Register.forming).
        self.forming: tuple[str, int, int] | None = None
        self.fingerprint: pb.ConfigFingerprint | None = None  # built once the executor said its versions

    @property
    def connected(self) -> asyncio.Event:
        return self.link.connected

    async def run(self) -> None:
        self._ticker = asyncio.create_task(self._tick())  # held: the loop keeps only weak references
        self.logs.open()
        try:
            began = time.monotonic()
            await self._start_executor()
            if self.executor is None:  # stopped before an executor came up: nothing is ready
                return
            # Said once: a daemon that is slow to appear says where its first seconds went.
            log.info("worker %s: executor ready on %s in %.1f s; registering with %s", self.worker_id,
                     self.config.device, time.monotonic() - began, self.link.address)
            self.telemetry = telemetry.open_for(self.device)
            self.fingerprint = fingerprint.build(self.device.type, self.executor.software if self.executor else (),
                                                 self.telemetry)
            await self.link.run(self._stopping)
        finally:
            if self.telemetry:
                self.telemetry.stop()
            if self.executor:
                await self.executor.stop()
            self.logs.close()

    async def _tick(self) -> None:
        while not self._stopping.is_set():
            self.loop_alive_at = time.monotonic()
            await asyncio.sleep(1.0)

    def stop(self) -> None:
        """Leave the coordinator and stop the executor (what a first SIGTERM does)."""
        self._stopping.set()
        self.link.stop()

    def register_message(self) -> wpb.Register:
        job_id, rank = self.job or self.link.unreported_done() or ("", 0)
        d = self.device
        return wpb.Register(
            worker_id=self.worker_id, host=self.config.host_name or socket.gethostname(), address=self.advertise, device=d.to_pb(),
            backend=d.backend, running_job_id=job_id, running_rank=rank, warm_group=self.holds,
            executor_restarts=self.restarts, version=__version__, k8s_token=read_token(self.config.k8s_token_file),
            forming=(forming := self.forming_group()) is not None, forming_store_port=forming or 0,
            fingerprint=self.fingerprint)

    def forming_group(self) -> int | None:
        """As rank 0 of a new group still forming (the job runs here and the executor has run no
        op since its assignment): its store's port, 0 while it binds it; None otherwise."""
        if self.forming and self.job and self.job[0] == self.forming[0] and self.executor_ops() == self.forming[2]:
            return self.forming[1]
        return None

    def heartbeat_message(self) -> wpb.Heartbeat:
        health, detail = self.executor.health() if self.executor else (pb.EXECUTOR_STARTING, "starting")
        return wpb.Heartbeat(job_id=self.job[0] if self.job else "", op_seq=self.executor_ops(),
                             executor=health, executor_detail=detail,
                             telemetry=self.telemetry.latest() if self.telemetry else None)

    # ---- what the coordinator says ---------------------------------------------------------

    async def on_coordinator(self, msg: wpb.CoordinatorMessage) -> None:
        kind = msg.WhichOneof("msg")
        if kind == "assignment":
            await self._assign(msg.assignment)
        elif kind == "abort":
            await self._abort(msg.abort)
        elif kind == "drop_group":
            await self._drop(msg.drop_group)

    async def _assign(self, a: wpb.Assignment) -> None:
        async with self._lock:
            if self.job or self.executor is None:
                why = f"worker busy with job {self.job[0]}" if self.job else "worker has no executor"
                # The coordinator placed us wrongly: refuse the new job rather than corrupt the old.
                self._send_done(a.rank, api.Done.failed(a.job_id, why, wpb.RANK_ERROR, holds=self.holds), kept=False)
                return
            self.job = (a.job_id, a.rank)
            self.forming = (a.job_id, 0, self.executor_ops()) if a.rank == 0 and a.group_key != self.holds else None
            self.link.forget_done()
            self.executor.send(api.Run(a.SerializeToString(), self.logs.path(a.job_id, a.rank)))

    async def _abort(self, abort: wpb.Abort) -> None:
        async with self._lock:
            if not self.job or self.job[0] != abort.job_id:
                # Not (or no longer) running it: say so, so the coordinator never waits on us;
                # unless our kept Done of it, sent again after the Register, has said so.
                if not self.link.kept_done(abort.job_id):
                    self._send_done(0, api.Done.failed(abort.job_id, "aborted: not running it", wpb.ABORTED,
                                                       holds=self.holds), kept=False)
                return
            job_id, rank = self.job
            log.warning("aborting job %s: %s", job_id, abort.reason)
            # The group may be mid-collective with a dead peer: only a new process is safe.
            await self._retire_executor()
            self.job = None
            log_text = self.logs.last(job_id, rank, f"aborted ({abort.reason}): the executor was replaced")
            self._send_done(rank, api.Done.failed(job_id, f"aborted: {abort.reason}", wpb.ABORTED, log=log_text))
            await self._start_executor()  # under the lock: no assignment runs before it is up

    async def _drop(self, drop: wpb.DropGroup) -> None:
        async with self._lock:
            key = drop.group_key
            if self.job:
                return  # the coordinator asks again once this job ends and we say what we hold
            if self.holds == key and self.executor:
                done = self._drops[key] = asyncio.get_running_loop().create_future()
                self.executor.send(api.DropGroup(key))
                try:
                    await asyncio.wait_for(done, DROP_TIMEOUT_S)
                except TimeoutError:
                    log.warning("executor did not drop group %s in %.0f s: replacing it", key, DROP_TIMEOUT_S)
                    await self._replace_executor()
                finally:
                    self._drops.pop(key, None)
            if self.holds == key:
                self.holds = ""
            self.link.send(wpb.WorkerMessage(group_dropped=wpb.GroupDropped(group_key=key)))

    # ---- what the executor says ------------------------------------------------------------

    def on_executor(self, handle: ExecutorHandle, msg) -> None:
        if handle is not self.executor:
            return  # the last words of an executor that was already replaced
        job_id, rank = self.job or ("", 0)
        if isinstance(msg, api.Progress) and msg.job_id == job_id:
            self.link.send(wpb.WorkerMessage(progress=wpb.ProgressReport(job_id=job_id, rank=rank, progress=pb.Progress(
                done=msg.done, total=msg.total, size_bytes=msg.size_bytes))))
        elif isinstance(msg, api.Result) and msg.job_id == job_id:
            self.link.send(wpb.WorkerMessage(result=wpb.ResultReport(
                job_id=job_id, result=pb.SizeResult.FromString(msg.row))))
        elif isinstance(msg, api.StoreReady) and msg.job_id == job_id:
            if self.forming and self.forming[0] == job_id:
                self.forming = (job_id, msg.port, self.forming[2])
            self.link.send(wpb.WorkerMessage(store_ready=wpb.StoreReady(
                job_id=job_id, group_key=msg.group_key, store_port=msg.port)))
        elif isinstance(msg, api.Done) and msg.job_id == job_id:
            self.job, self.holds = None, msg.holds
            self._send_done(rank, msg)
            if not msg.ok:  # it retires (worker/executor.py): replaced before any next Run reaches it
                self._replacing = asyncio.create_task(self._replace_retired(handle))
        elif isinstance(msg, api.GroupDropped):
            if msg.group_key == self.holds:
                self.holds = ""
            future = self._drops.get(msg.group_key)
            if future and not future.done():
                future.set_result(None)
        elif isinstance(msg, api.Exited):
            asyncio.create_task(self._on_executor_death(handle))

    async def _on_executor_death(self, handle: ExecutorHandle) -> None:
        async with self._lock:
            if handle is not self.executor or self._stopping.is_set():
                return
            code = await handle.reap()
            job, held = self.job, self.holds
            if code == 0 and not job:  # it retired after a failed job (worker/executor.py)
                log.info("executor retired after a failed job; starting a fresh one")
            why = f"executor process died (exit code {code})" if code is None or code >= 0 else \
                f"executor process killed by signal {-code}"
            if code != 0 or job:
                log.error("%s", why)
            await self._retire_executor()
            self.job = None
            # Report before the replacement starts: a peer's communication error waits only a
            # few seconds for the cause to report (coordinator/core/liveness.py).
            if job:
                self._send_done(job[1], api.Done.failed(job[0], why, wpb.EXECUTOR_DIED,
                                                        log=self.logs.last(*job, why)))
            elif held:
                self.link.send(wpb.WorkerMessage(group_dropped=wpb.GroupDropped(group_key=held)))
            await self._start_executor()

    # ---- the executor process --------------------------------------------------------------

    def executor_ops(self) -> int:
        return self.executor.op_seq if self.executor else 0

    def ops_run(self) -> int:
        """Collective ops run by all of this daemon's executors so far."""
        with self._stats_lock:
            return self.ops_retired + self.executor_ops()

    async def _start_executor(self) -> None:
        """Start an executor, retrying with backoff until one starts or the daemon stops."""
        backoff = Backoff(base=0.5, cap=30.0)
        while not self._stopping.is_set():
            handle = ExecutorHandle(self.config.device, self.on_executor, self.advertise)
            try:
                device = await unless_set(self._stopping, handle.start())
            except ExecutorStartError as exc:
                log.error("%s; retrying", exc)
                await unless_set(self._stopping, asyncio.sleep(backoff.next_delay()))
                continue
            if device is None or self._stopping.is_set():  # told to stop while it started
                return await handle.kill()
            self.device, self.executor = device, handle
            return

    async def _retire_executor(self) -> None:
        old, self.executor = self.executor, None
        if old:
            await old.kill()
            with self._stats_lock:  # one step for a reader on another thread: no op lost or counted twice
                self.ops_retired += old.op_seq
        self.holds = ""
        self.restarts += 1

    async def _replace_executor(self) -> None:
        await self._retire_executor()
        await self._start_executor()

    async def _replace_retired(self, handle: ExecutorHandle) -> None:
        async with self._lock:  # taken before any assignment that follows the failed Done
            if handle is self.executor and not self._stopping.is_set():
                await self._replace_executor()

    def _send_done(self, rank: int, done: api.Done, kept: bool = True) -> None:
        """`kept`: the end of a job this daemon ran (worker/link.py sends it again after a
        reconnect); a refusal or a "not running it" is not."""
        self.jobs_done["succeeded" if done.ok else _OUTCOMES.get(done.failure, "failed")] += 1
        self.link.send(wpb.WorkerMessage(done=done.to_pb(rank, self.restarts)), kept=kept)
        self.logs.remove(done.job_id, rank)  # sent: the capture file has served


async def run_daemons(configs: list[WorkerConfig], metrics=None) -> None:
    """Run one daemon per device in this process until SIGINT/SIGTERM; `metrics` (a started
    worker.metrics.WorkerMetrics) serves their metrics."""
    from ringleader.signals import on_stop_signals

    daemons = [WorkerDaemon(c) for c in configs]
    if metrics is not None:
        metrics.add(daemons)
    on_stop_signals(asyncio.get_running_loop(), lambda: [d.stop() for d in daemons])
    await asyncio.gather(*(d.run() for d in daemons))

