"""The workers' streams (WorkerService.Connect) on the gRPC edge loop (coordinator/edge/hop.py):
each daemon's stream is read and written there, and what crosses to the core loop crosses in
batches: messages read go into one `Inbox` that the core drains once a turn (within the intake
gate's share, coordinator/core/load.py; heartbeats wake it at most HEARTBEAT_BATCH_S late), and
what the core sends the workers is moved to the edge in one hop per turn (`Outgoing`). A hop per
message cost the core 2.7x its CPU per job with 5,000 simulated workers draining a queue
(bench/control_plane.py --churn, 4 x H200 host). The registration itself (identity checks,
Coordinator.register) runs on the core, once per stream."""

from __future__ import annotations

import asyncio
import collections
import threading
import time

import grpc

from coordinator.core import admission
from coordinator.shell.facade import Coordinator
from coordinator.edge import identity
from coordinator.edge.hop import EdgeContext, client, lane, on, retrieved
from coordinator.edge.identity import WorkerIdentities
from coordinator.edge.servicers import abort_with
from ringleader.errors import RingleaderError
from ringleader.v1 import workers_pb2 as wpb, workers_pb2_grpc

_GONE = object()  # in the inbox after a stream's last message: its disconnect, in order
WRITER_GRACE_S = 1.0  # how long an ended stream's handler waits for its cancelled tasks
# A heartbeat wakes the core loop at most this late; any other message wakes it at once and takes
# the waiting heartbeats along. Woken per heartbeat, an idle core paid a wake-up (the self-pipe, the
# GIL handed across threads) for nearly every one of a fleet's heartbeats.
HEARTBEAT_BATCH_S = 0.01


LANE_PER_MESSAGE = 8  # users' calls started between two worker messages, at most (the rest in the lane's turn)
# Users' calls started at one drain's checkpoints take at most about this long; they do not count
# against the messages' own budget (IntakeGate.budget_s). Counted together, a burst of cancels
# (0.5-1 ms each, up to 8 between two messages) left a few messages a turn: drains of 15-29 ms,
# mostly cancels, and worker messages waited 4-6 s for the core (churn, 5,000 workers, the
# coordinator on 2 cores: docs/decisions/edge-loop.md).
HOPS_PER_DRAIN_S = 0.004


class Inbox:
    """Worker messages from the edge loop, applied on the core loop in order, a turn's share at a time."""

    def __init__(self, c: Coordinator, identities: WorkerIdentities, core: asyncio.AbstractEventLoop,
                 edge: asyncio.AbstractEventLoop, batch_s: float = HEARTBEAT_BATCH_S) -> None:
        self.c, self.identities, self.core, self.edge, self.batch_s = c, identities, core, edge, batch_s
        self._items = Backlog()
        self._lock = threading.Lock()
        self._scheduled = False
        self._timer: asyncio.TimerHandle | None = None  # the edge's wake-up for waiting heartbeats
        self.lane = lane(core)  # users' calls hopped to the core start between two messages
        c.intake.waiting_since = self.waiting_since  # what liveness counts a silence up to

    def waiting_since(self) -> float:
        """When the oldest message not yet applied arrived (monotonic; 0.0: none waits)."""
        with self._lock:
            return self._items.oldest()

    def put(self, conn, msg, why: str = "", raw: bytes | None = None) -> None:
        """From the edge loop (`msg` _GONE with `why`: the stream ended). With `raw`, the message's
        bytes, what waits is those bytes, parsed again when applied (Backlog says why)."""
        with self._lock:
            self._items.append(conn, msg if raw is None else raw, why, time.monotonic())
            if self._scheduled:
                return
            if self.batch_s and msg is not _GONE and msg.WhichOneof("msg") == "heartbeat":
                if self._timer is None:
                    self._timer = self.edge.call_later(self.batch_s, self._wake)
                return
        self._wake()

    def _wake(self) -> None:
        """On the edge loop: the core drains what has come (once, however many ask before it does)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._scheduled or not self._items:
                return
            self._scheduled = True
        self.core.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        gate, users = self.c.intake, self.lane
        hops_left = HOPS_PER_DRAIN_S
        while True:
            if users.pending and hops_left > 0:
                began = time.perf_counter()
                users.run(LANE_PER_MESSAGE)
                spent = time.perf_counter() - began
                hops_left -= spent
                gate.exclude(spent)
            with self._lock:
                if not self._items:
                    self._scheduled = False
                    return
                if not gate.take():  # this turn's share is spent: the rest in the next turns
                    gate.deferred += len(self._items)
                    break
                conn, msg, why, since = self._items.popleft()
            gate.waits.record(time.monotonic() - since)
            self._apply(conn, wpb.WorkerMessage.FromString(msg) if type(msg) is bytes else msg, why)
        self.core.call_soon(self._drain)

    def _apply(self, conn, msg, why: str) -> None:
        if self.c.closed or (msg is _GONE and self.c.stopping):  # facade.stop() says why: applied,
            return  # those ends failed every running job ("lost: stream cancelled") we would re-attach
        if msg is _GONE:
            self.c.disconnect(conn, why)
        elif msg.WhichOneof("msg") == "credential_stored":  # identity's, not the control core's
            if self.identities.stored(conn.reg.worker_id, msg.credential_stored.secret_sha256):
                asyncio.ensure_future(self.c.durable())
        else:
            self.c.on_message(conn, msg)


class Backlog:
    """The inbox's messages waiting for the core, in four deques and no object per message that the
    cyclic collector tracks: relayed messages wait as their bytes, and their connections, reasons
    and arrival times each in a deque of their own, not as a tuple. In a drain thousands wait for
    seconds, so each would survive young collection passes and be walked again by the middle ones:
    with the collector on a clock (coordinator/shell/gcpace.py), 11,000-14,500 waiting messages, two
    objects each, were three quarters of the middle generation (3,000 workers, the development VM)."""

    __slots__ = ("conns", "msgs", "whys", "since")

    def __init__(self) -> None:
        self.conns, self.msgs, self.whys, self.since = (collections.deque() for _ in range(4))

    def __len__(self) -> int:
        return len(self.conns)

    def append(self, conn, msg, why: str, since: float) -> None:
        self.conns.append(conn)
        self.msgs.append(msg)
        self.whys.append(why)
        self.since.append(since)

    def popleft(self) -> tuple:
        return self.conns.popleft(), self.msgs.popleft(), self.whys.popleft(), self.since.popleft()

    def oldest(self) -> float:
        """When the oldest waiting message arrived (monotonic; 0.0: none waits)."""
        return self.since[0] if self.since else 0.0


class Outgoing:
    """The workers' batches from the core loop to the edge's queues: one hop a turn for all of them.
    A hop per worker's batch wrote the core's self-pipe once per rank: a job's start or end over
    hundreds of ranks woke the edge hundreds of times in one turn."""

    def __init__(self, core: asyncio.AbstractEventLoop, edge: asyncio.AbstractEventLoop) -> None:
        self.core, self.edge = core, edge
        self._pending: list[tuple[asyncio.Queue, list]] = []

    def put(self, out: asyncio.Queue, batch: list) -> None:
        """On the core loop: `batch` for the edge queue `out`, after the rest of this turn's."""
        if not self._pending:
            self.core.call_soon(self._flush)
        self._pending.append((out, batch))

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if not self.edge.is_closed():  # at shutdown the streams are gone with it
            self.edge.call_soon_threadsafe(_deliver, pending)


class WorkerServicer(workers_pb2_grpc.WorkerServiceServicer):
    """One long-lived stream per daemon: the first message registers, the rest flow both ways.
    Its methods run on the edge loop; `core` is the coordinator's."""

    def __init__(self, coordinator: Coordinator, identities: WorkerIdentities,
                 core: asyncio.AbstractEventLoop, edge: asyncio.AbstractEventLoop) -> None:
        self.c, self.identities, self.core, self.edge = coordinator, identities, core, edge
        self.inbox = Inbox(coordinator, identities, core, edge)
        self.outgoing = Outgoing(core, edge)
        self.direct = 0  # streams served on this server now (not through a relay)
        self.auto = None  # coordinator/edge/auto_relay.AutoRelay, where the fleet may outgrow this server

    async def Connect(self, request_iterator, context):
        first = await context.read()
        if first is grpc.aio.EOF or first.WhichOneof("msg") != "register":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "register: the first message must be Register")
        if self.auto is not None and not first.register.relay_unreachable and (port := await self.auto.move_to(self.direct)):
            # No check here: the relay checks the daemon's token and TLS as this server would, and
            # the core decides the rest when the relayed stream registers.
            await context.write(wpb.CoordinatorMessage(registered=wpb.Registered(move_to_port=port)))
            return
        conn, secret = await on(self.core, self._register(first.register, EdgeContext(context, self.edge)),
                                client(context))
        self.direct += 1
        out: asyncio.Queue = asyncio.Queue()
        self.core.call_soon_threadsafe(self.attach, conn, out)
        reader = asyncio.create_task(self._read(conn, context))
        writer = asyncio.create_task(self._write(context, out, secret))
        why = "stream closed by the worker"
        try:
            # Either side may end the stream: the worker closing it, or the coordinator
            # dropping the worker (missed heartbeats), which ends the writer.
            await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
            if reader.done() and reader.exception():
                why = f"stream broken ({type(reader.exception()).__name__})"
        except asyncio.CancelledError:
            why = "stream cancelled"
            raise
        finally:
            self.direct -= 1
            for task in (reader, writer):
                task.cancel()
            self.core.call_soon_threadsafe(detach, conn)
            # The reader, cancelled, puts nothing more: the disconnect goes in now, after every
            # message it read. Waiting for the writer first held it back: a writer inside
            # context.write to a daemon killed mid-stream ends only once this handler returns and
            # gRPC ends the call, so the worker stayed connected until its heartbeats timed out
            # (7 of 50 rounds of two daemons killed together, as test_worker_restart.py does).
            self.inbox.put(conn, _GONE, why)
            await asyncio.wait({reader, writer}, timeout=WRITER_GRACE_S)
            for task in (reader, writer):
                task.add_done_callback(retrieved)

    async def _register(self, reg, context: EdgeContext):
        """On the core loop: who the daemon is, then its registration; (conn, secret to issue)."""
        try:
            admission.check_registration(reg)  # before its address is resolved or its id looked up
            await identity.check_address(reg, context.peer())
            vouched = await self.identities.kubernetes(reg)
            known = self.c.workers.get(reg.worker_id)
            cert = identity.peer_identity(context)
            secret = self.identities.check(reg, cert, vouched, connected=bool(known and known.connected),
                                           peer=context.peer())
            reg.worker_secret = reg.k8s_token = ""  # they go no further than these checks
            conn = self.c.register(reg)
        except RingleaderError as exc:
            self.identities.log_refusal(reg.worker_id, str(exc))
            await abort_with(context, exc)
        if secret:  # bound once the daemon acknowledges storing it (Inbox._apply), or now (`issued`)
            self.identities.issued(reg.worker_id, secret, cert)
        return conn, secret

    async def _read(self, conn, context) -> None:
        while True:
            msg = await context.read()
            if msg is grpc.aio.EOF:
                return
            if msg.WhichOneof("msg") == "done":
                # A rank's late report of a job the store has let go of from memory (PostgreSQL:
                # one finished more than HOT_FINISHED jobs ago) is read here, off the core loop,
                # before the core stores its log; this stream's later messages wait behind it.
                await self.c.prefetch(job_id=msg.done.job_id)
            self.inbox.put(conn, msg)

    def attach(self, conn, out) -> None:
        """On the core loop: what waits in the worker's outbox goes to the edge's queue `out` (or
        what stands in for it: relay_host.py), and from now on each message the core sends goes
        straight after it (`WorkerConn.route`). A task per worker waiting on its outbox cost a
        wake-up and a new future per message sent, and kept 5,000 tasks for the collector to walk."""
        batch = []
        while not conn.outbox.empty():
            batch.append(conn.outbox.get_nowait())
        if batch:
            self.outgoing.put(out, batch)
        put = self.outgoing.put
        conn.route = lambda msg: put(out, [msg])

    async def _write(self, context, out: asyncio.Queue, secret: str) -> None:
        while True:
            msg = await out.get()
            if msg is None:
                return
            secret = with_secret(msg, secret)
            await context.write(msg)


def detach(conn) -> None:
    """On the core loop: the stream has ended; anything sent later waits in the outbox, unread."""
    conn.route = None


def with_secret(msg, secret: str) -> str:
    """Put the secret to issue into `msg` if it is the stream's Registered (the first message);
    returns the secret still to put ("" once put)."""
    if secret and msg.WhichOneof("msg") == "registered":
        msg.registered.worker_secret = secret
        return ""
    return secret


def _deliver(pending: list[tuple[asyncio.Queue, list]]) -> None:
    for queue, items in pending:
        for item in items:
            queue.put_nowait(item)
