"""The coordinator's end of its worker relay (coordinator/edge/relay.py): the relay process,
started and restarted here, and its link, read and written on the edge loop.

Each relayed stream becomes what a stream on the coordinator's own port is
(coordinator/edge/worker_stream.py): the same registration on the core (`WorkerServicer._register`,
with the peer and certificate the relay saw), the same `Inbox` for its messages and the same
`Outgoing` hop for what the core sends, whose edge queue is here a stand-in that writes frames.
A relay that exits ends every stream it carried, as a broken stream would, and is started again
on the same port; the daemons reconnect to it as they do to a restarted coordinator.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import grpc
from google.protobuf.message import DecodeError

from coordinator.edge import relay_link as link
from coordinator.edge.hop import on
from coordinator.edge.relay import SETTINGS_ENV
from coordinator.edge.worker_stream import _GONE, WorkerServicer, detach, with_secret
from ringleader.errors import InvalidSpec, RingleaderError
from ringleader.security import with_port
from ringleader.v1 import workers_pb2 as wpb

log = logging.getLogger("ringleader.coordinator")

START_S = 30.0  # a relay that does not listen within this long has failed to start
RESTART_S = 1.0  # between a relay's exit and its next start


class RelayRefused(Exception):
    """A registration refused on the core (RelayContext.abort): the status the relay answers."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing: tuple) -> None:
        super().__init__(details)
        self.code, self.details, self.trailing = code, details, trailing


class RelayContext:
    """What `WorkerServicer._register` reads of a call, as the relay saw it."""

    def __init__(self, meta: dict) -> None:
        self._peer = meta.get("peer", "")
        pems = [p.encode() for p in meta.get("pem") or []]
        self._auth = {"x509_pem_cert": pems} if pems else {}
        self._trailing: tuple = ()

    def peer(self) -> str:
        return self._peer

    def auth_context(self) -> dict:
        return self._auth

    def set_trailing_metadata(self, metadata) -> None:
        self._trailing = tuple(metadata)

    async def abort(self, code, details: str = "", trailing_metadata=()) -> None:
        raise RelayRefused(code, details, tuple(trailing_metadata) or self._trailing)


class _LinkSink:
    """Stands in for a stream's edge queue (worker_stream._deliver puts into it): frames to the relay."""

    def __init__(self, host: "RelayHost", key: tuple, secret: str) -> None:
        self.host, self.key, self.secret = host, key, secret

    def put_nowait(self, msg) -> None:
        if msg is None:
            self.host._send(link.END, self.key)
            return
        self.secret = with_secret(msg, self.secret)
        self.host._send(link.OUT, self.key, msg.SerializeToString())


class RelayHost:
    """Runs on the edge loop (`start`, `stop` and every frame)."""

    def __init__(self, workers: WorkerServicer, address: str, settings: str, cpus: Sequence[int] = ()) -> None:
        self.workers, self.address, self.settings, self.cpus = workers, address, settings, set(cpus)
        self.proto: link.LinkProtocol | None = None
        self.proc: subprocess.Popen | None = None
        self.port = 0
        # Streams are keyed (relay generation, the relay's stream id): a restarted relay numbers
        # its streams from 1 again, while a registration of its predecessor's may still be on the core.
        self._gen = 0
        self._conns: dict = {}  # key -> its WorkerConn
        self._held: dict[tuple, list] = {}  # key -> messages behind a read-ahead of the store (prefetch)
        self._registering: set[tuple] = set()  # streams whose registration runs on the core
        self._early_gone: set[tuple] = set()  # of those, the ones that ended meanwhile
        self._dir = self._path = ""  # the link's socket, in a directory of its own (start)
        self._server: asyncio.AbstractServer | None = None
        self._hello: asyncio.Future | None = None
        self._stopping = False
        self._restarter: asyncio.Task | None = None
        self.restarts = 0  # relays started again after their link ended (relay_metrics.py)
        self.alive = 0  # heartbeats that crossed in ALIVE frames (unchanged ones, a batch an input)

    @property
    def streams(self) -> int:
        return len(self._conns)

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        self._dir = tempfile.mkdtemp(prefix="ringleader-relay-")
        self._path = str(Path(self._dir) / "link.sock")
        self._server = await loop.create_unix_server(self._accept, self._path)
        os.chmod(self._path, 0o600)
        await self._spawn()
        return self.port

    def _accept(self) -> link.LinkProtocol:
        self._gen += 1
        gen = self._gen
        proto = link.LinkProtocol(lambda kind, n, payload: self._on_frame(kind, (gen, n), payload),
                                  lambda exc: self._on_lost(proto, exc))
        if self.proto is not None:  # one relay at a time: a new link replaces the old one, and its streams
            self._close_link()
            self._drop_streams("stream broken (another worker relay took the link)")
        self.proto = proto
        return proto

    async def _spawn(self) -> None:
        loop = asyncio.get_running_loop()
        self._hello = loop.create_future()
        address = with_port(self.address, self.port) if self.port else self.address
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "coordinator.edge.relay", "--link", self._path, "--listen", address],
            env={**os.environ, SETTINGS_ENV: self.settings}, stdin=subprocess.DEVNULL)
        if self.cpus:  # set from here: a preexec_fn forks this gRPC process, whose fork handlers abort
            os.sched_setaffinity(self.proc.pid, self.cpus)
        deadline = time.monotonic() + START_S
        while not self._hello.done():
            if self.proc.poll() is not None:
                await asyncio.wait({self._hello}, timeout=0.5)  # its last word (FAILED) may be on its way
                if not self._hello.done():
                    raise OSError(f"--worker-address: the worker relay exited ({self.proc.returncode}) before "
                                  f"listening on {address}; see its log above")
            elif time.monotonic() > deadline:
                self.proc.kill()
                raise OSError(f"--worker-address: the worker relay did not listen on {address} within {START_S:.0f} s")
            await asyncio.wait({self._hello}, timeout=0.05)
        self.port = self._hello.result()  # or its FAILED, raised
        log.info("worker relay (pid %d) serves the workers' streams on port %d", self.proc.pid, self.port)

    async def stop(self) -> None:
        self._stopping = True
        if self._restarter:
            self._restarter.cancel()
        self._close_link()  # the relay ends with its link
        if self._server is not None:
            self._server.close()
        if self.proc is not None:
            try:
                await asyncio.to_thread(self.proc.wait, 5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait)
        if self._dir:  # (the relay, seeing its link end, may have removed it first)
            shutil.rmtree(self._dir, ignore_errors=True)

    # ---- frames from the relay --------------------------------------------------------------------

    def _on_frame(self, kind: int, key: tuple, payload: bytes) -> None:
        if kind == link.MESSAGE:
            self._message(key, payload)
        elif kind == link.ALIVE:
            self._alive(key[0], payload)
        elif kind == link.GONE:
            self._gone(key, payload.decode(errors="replace"))
        elif kind == link.REGISTER:
            self._registering.add(key)
            asyncio.ensure_future(self._register(key, payload))
        elif kind == link.HELLO and self._hello is not None and not self._hello.done():
            self._hello.set_result(int(payload))
        elif kind == link.FAILED and self._hello is not None and not self._hello.done():
            self._hello.set_exception(InvalidSpec("--worker-address", payload.decode(errors="replace")))

    async def _register(self, key: tuple, payload: bytes) -> None:
        try:
            await self._registered(key, payload)
        finally:
            self._registering.discard(key)
            self._early_gone.discard(key)

    async def _registered(self, key: tuple, payload: bytes) -> None:
        w = self.workers
        try:
            meta, raw = link.split_register(payload)
            reg = wpb.WorkerMessage.FromString(raw).register
            context = RelayContext(meta)
            conn, secret = await on(w.core, w._register(reg, context), context.peer())
        except RelayRefused as exc:
            self._send(link.ABORT, key, link.abort_payload(exc.code.value[0], exc.details, exc.trailing))
            return
        except Exception as exc:  # a bug of ours: the daemon retries, the log says why
            log.exception("relayed registration failed")
            self._send(link.ABORT, key, link.abort_payload(grpc.StatusCode.INTERNAL.value[0], f"registration failed: {exc}"))
            return
        w.core.call_soon_threadsafe(w.attach, conn, _LinkSink(self, key, secret))
        self._conns[key] = conn
        if key in self._early_gone:
            self._gone(key, "stream closed by the worker")
        else:
            self._send(link.ACCEPTED, key)

    def _alive(self, gen: int, payload: bytes) -> None:
        """Streams whose heartbeat came again unchanged: one input for the batch (inputs.Alive)."""
        conns = [c for sid in struct.unpack(f"!{len(payload) // 4}I", payload) if (c := self._conns.get((gen, sid)))]
        if conns:
            self.alive += len(conns)
            self.workers.core.call_soon_threadsafe(self.workers.c.on_alive, conns)

    def _message(self, key: tuple, payload: bytes) -> None:
        conn = self._conns.get(key)
        if conn is None:
            return  # its registration was refused, or the stream is being ended
        try:
            msg = wpb.WorkerMessage.FromString(payload)
        except DecodeError:
            self._send(link.ABORT, key, link.abort_payload(grpc.StatusCode.INVALID_ARGUMENT.value[0],
                                                           "request: the bytes are not a WorkerMessage"))
            return
        held = self._held.get(key)
        if held is not None:
            held.append(msg)
        elif msg.WhichOneof("msg") == "done" and not self.workers.c.store.resident(msg.done.job_id, ""):
            # As WorkerServicer._read: read the job in off the core loop; the stream's later messages wait.
            self._held[key] = [msg]
            asyncio.ensure_future(self._prefetched(key, conn, msg.done.job_id))
        else:
            self.workers.inbox.put(conn, msg, raw=payload)  # waits as bytes: no object the collector walks

    async def _prefetched(self, key: tuple, conn, job_id: str) -> None:
        try:
            await self.workers.c.prefetch(job_id=job_id)
        finally:
            for msg in self._held.pop(key, ()):  # none left if the stream ended meanwhile (_gone)
                self.workers.inbox.put(conn, msg)

    def _gone(self, key: tuple, why: str) -> None:
        conn = self._conns.pop(key, None)
        if conn is None:
            if key in self._registering:  # its registration is still on the core
                self._early_gone.add(key)
            return  # or was refused
        for msg in self._held.pop(key, ()):
            self.workers.inbox.put(conn, msg)
        self.workers.core.call_soon_threadsafe(detach, conn)
        self.workers.inbox.put(conn, _GONE, why)

    def _on_lost(self, proto: link.LinkProtocol, exc: Exception | None) -> None:
        if proto is not self.proto:
            return
        self.proto = None
        self._drop_streams("stream broken (the worker relay exited)")
        if self._hello is not None and not self._hello.done():
            return  # it never listened: _spawn says why
        if not self._stopping:
            log.error("the worker relay's link closed: starting it again on port %d", self.port)
            self._restarter = asyncio.ensure_future(self._restart())

    def _drop_streams(self, why: str) -> None:
        for key in list(self._conns):
            self._gone(key, why)
        self._early_gone.update(self._registering)

    async def _restart(self) -> None:
        while not self._stopping:
            if self.proc is not None:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait)
            await asyncio.sleep(RESTART_S)
            try:
                await self._spawn()
                self.restarts += 1
                return
            except (OSError, RingleaderError) as exc:  # its port taken meanwhile, say
                log.error("%s: trying again", exc)

    def _close_link(self) -> None:
        """Tell the relay to stop, then end its link (a link that ends untold: the coordinator died)."""
        if self.proto is not None and self.proto.transport is not None:
            self.proto.send(link.STOP, 0)
            self.proto.flush()
            self.proto.transport.close()

    def _send(self, kind: int, key: tuple, payload: bytes = b"") -> None:
        if self.proto is not None and key[0] == self._gen:  # (a stream of a relay gone is gone)
            self.proto.send(kind, key[1], payload)
