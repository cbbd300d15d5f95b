"""A daemon's link to the coordinator: one long-lived stream, reconnected with backoff.

Messages for the coordinator wait in an outbox that survives reconnects (a failed write goes
back to the front); heartbeats are dropped while disconnected, as they would be stale. The last
JobDone of a job this daemon ran is also kept after it is written, and sent again at the head of
every new stream until the next assignment: a write that succeeds says nothing of its arrival (the
coordinator may have died with it in a socket buffer, or taken it and died before its paced
commit), and a Done lost so would have the job run again after the restart. Errors of
the link or of handling one message are logged and lead to a reconnect or to the next message:
they never end the daemon.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
from typing import Awaitable, Callable

import grpc

from ringleader.grpc_options import KEEPALIVE_OPTIONS
from ringleader.leader import Rotation
from ringleader.security import ClientSecurity, with_port
from ringleader.v1 import workers_pb2 as wpb
from ringleader.v1 import workers_pb2_grpc
from worker import faults
from worker.credential import WorkerSecret
from worker.tlsdiag import tls_refusal

log = logging.getLogger("ringleader.worker")


class Backoff:
    """Exponential backoff with full jitter; reset after a successful connection."""

    def __init__(self, base: float = 0.1, cap: float = 5.0) -> None:
        self.base, self.cap, self.attempt = base, cap, 0

    def next_delay(self) -> float:
        self.attempt += 1
        return random.uniform(0, min(self.cap, self.base * 2 ** self.attempt))

    def reset(self) -> None:
        self.attempt = 0


# A relay's answers about this daemon, not about the relay: the coordinator's own would be the same.
REFUSALS = (grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED,
            grpc.StatusCode.PERMISSION_DENIED)


class Moved(Exception):
    """The coordinator moved this stream to its worker relay: dial it now."""


class CoordinatorLink:
    """`register()` and `heartbeat()` build those messages when due; `on_message` handles each
    message down the stream, in order; `security` carries the workers' token and TLS settings;
    `secret` this worker's own credential (sent with every Register, replaced when issued)."""

    def __init__(self, address: str, worker_id: str, register: Callable[[], wpb.Register],
                 heartbeat: Callable[[], wpb.Heartbeat],
                 on_message: Callable[[wpb.CoordinatorMessage], Awaitable[None]], max_backoff_s: float,
                 security: ClientSecurity | None = None, secret: WorkerSecret | None = None) -> None:
        # Several coordinators ("a:1,b:1", one leading): follow the leader (ringleader/leader.py).
        self.rotation = Rotation(address)
        self.worker_id = worker_id
        self.security = security or ClientSecurity()  # the workers' token and TLS
        self.secret = secret or WorkerSecret(worker_id)
        self.register, self.heartbeat, self.on_message = register, heartbeat, on_message
        self.max_backoff_s = max_backoff_s
        self.heartbeat_s = 1.0
        self.connected = asyncio.Event()
        self._outbox: collections.deque[wpb.WorkerMessage] = collections.deque()
        self._outbox_ready = asyncio.Event()
        self._kept_done: wpb.WorkerMessage | None = None  # sent again on each new stream (see above)
        self._session: asyncio.Task | None = None
        self._stopping = False
        self._refusal = ""  # the coordinator's last refusal of our credentials, logged once
        # The coordinator's worker relay, where the coordinator moved this daemon's stream
        # (Registered.move_to_port; coordinator/edge/auto_relay.py): dialled until it fails.
        self._moved = ""
        self._relay_failed = False  # the relay we were moved to did not answer: ask to stay direct

    @property
    def address(self) -> str:
        return self._moved or self.rotation.current

    def send(self, msg: wpb.WorkerMessage, kept: bool = False) -> None:
        """Queue `msg` for the coordinator; `kept`: it is the JobDone of a job this daemon ran,
        sent again on every new stream until `forget_done` (a reply such as "not running it" is not)."""
        if msg.WhichOneof("msg") == "heartbeat" and not self.connected.is_set():
            return  # stale heartbeats are worthless after a reconnect
        if kept:
            self._kept_done = msg
        self._outbox.append(msg)
        self._outbox_ready.set()

    def forget_done(self) -> None:
        """A new assignment: the coordinator took our last Done (it placed us again)."""
        self._kept_done = None

    def kept_done(self, job_id: str) -> bool:
        """Whether our kept Done is `job_id`'s: sent again, it answers the coordinator's abort
        of that job (what a registration naming a job it no longer runs brings)."""
        return self._kept_done is not None and self._kept_done.done.job_id == job_id

    def unreported_done(self) -> tuple[str, int] | None:
        """(job id, rank) of a JobDone still waiting in the outbox: a job that ended while no
        coordinator listened (a restart, a failover). The daemon registers with it as its running
        job, so the coordinator re-attaches the job and takes this Done, rather than run it again."""
        for msg in self._outbox:
            if msg.WhichOneof("msg") == "done":
                return msg.done.job_id, msg.done.rank
        return None

    def stop(self) -> None:
        self._stopping = True
        if self._session:
            self._session.cancel()

    async def run(self, stopping: asyncio.Event) -> None:
        backoff = Backoff(cap=self.max_backoff_s)
        while not stopping.is_set():
            self._session = asyncio.create_task(self._connect(backoff))
            try:
                await self._session
            except asyncio.CancelledError:
                if not self._stopping:
                    raise
            except Moved:
                continue  # dial the relay now
            except grpc.aio.AioRpcError as exc:
                if self._moved and exc.code() not in REFUSALS:  # the relay failed us: back to our address
                    log.warning("worker relay %s unreachable (%s): back to %s, served there from now on",
                                self._moved, exc.details() or exc.code().name, self.rotation.current)
                    self._moved, self._relay_failed = "", True
                elif exc.code() in (grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.INVALID_ARGUMENT):
                    log.warning("%s", exc.details())
                elif exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                    # A wrong token is the operator's to fix; keep trying so the worker joins
                    # once the coordinator's token is set right, but say so once, not every retry.
                    refusal = exc.details()
                    log.log(logging.ERROR if refusal != self._refusal else logging.DEBUG,
                            "coordinator %s refused this worker: %s", self.address, refusal)
                    self._refusal = refusal
                elif refusal := tls_refusal(exc.details() or "", self.security.tls):
                    log.log(logging.ERROR if refusal != self._refusal else logging.DEBUG,
                            "coordinator %s unreachable: %s", self.address, refusal)
                    self._refusal = refusal
                else:
                    log.info("coordinator %s unreachable (%s)", self.address, exc.details() or exc.code().name)
                if len(self.rotation.addresses) > 1:  # the leader may be another one now
                    self.rotation.failed(exc.details() or "")
            except Exception:  # a bug of ours: log it, reconnect, keep serving
                log.exception("worker session failed; reconnecting")
            self.connected.clear()
            try:
                await asyncio.wait_for(stopping.wait(), backoff.next_delay())
            except TimeoutError:
                pass

    async def _connect(self, backoff: Backoff) -> None:
        kept = self._kept_done
        if kept is not None and not any(m is kept for m in self._outbox):
            self._outbox.appendleft(kept)  # first, and named by the Register (unreported_done)
        async with self.security.aio_channel(self.address, options=KEEPALIVE_OPTIONS) as channel:
            call = workers_pb2_grpc.WorkerServiceStub(channel).Connect(metadata=self.security.metadata)
            register = self.register()
            if kept is not None:  # what a Done says of the executor is as of now, as the Register's is:
                # the group it held may have been dropped since (the coordinator takes the last word)
                kept.done.warm_group, kept.done.executor_restarts = register.warm_group, register.executor_restarts
            register.worker_secret = self.secret.value
            register.relay_unreachable = self._relay_failed and not self._moved
            await call.write(wpb.WorkerMessage(register=register))
            first = await call.read()
            if first is grpc.aio.EOF:
                if self._moved:  # the relay ended the stream unregistered: back to our address
                    self._moved, self._relay_failed = "", True
                return
            if first.registered.move_to_port:
                self._moved = with_port(self.rotation.current, first.registered.move_to_port)
                log.info("worker %s: %s moves this stream to its worker relay, %s", self.worker_id,
                         self.rotation.current, self._moved)
                backoff.reset()
                raise Moved()
            if first.registered.worker_secret:  # our id's first registration: keep what proves it
                await self._store_secret(call, first.registered.worker_secret)
            self.heartbeat_s = first.registered.heartbeat_interval_s or self.heartbeat_s
            backoff.reset()
            self._refusal = ""
            self.connected.set()
            log.info("worker %s registered with %s", self.worker_id, self.address)
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

    async def _store_secret(self, call, secret: str) -> None:
        """Store the issued secret, then acknowledge it: the coordinator binds our id to it only
        then, so a kill at any step leaves the id ours (coordinator/edge/identity.py)."""
        fault = faults.load()  # tests only: a kill at each step
        fault.at_registration(1)
        self.secret.keep(secret)
        fault.at_registration(2)
        await call.write(wpb.WorkerMessage(credential_stored=wpb.CredentialStored(secret_sha256=self.secret.sha256)))
        fault.at_registration(3)

    async def _read(self, call) -> None:
        while (msg := await call.read()) is not grpc.aio.EOF:
            try:
                await self.on_message(msg)
            except Exception:  # one bad message must not end the session (or the daemon)
                log.exception("handling %s failed", msg.WhichOneof("msg"))

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
            self.send(wpb.WorkerMessage(heartbeat=self.heartbeat()))
            await asyncio.sleep(self.heartbeat_s)
