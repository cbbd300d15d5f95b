"""The worker relay: a process of its own that serves the workers' streams (WorkerService.Connect)
on `--worker-address` and carries them to the coordinator over one link (relay_link.py); started
and restarted by the coordinator (relay_host.py), which decides everything: who may register, what
each message means, what each worker is sent.

Why a process: a stream in grpc.aio keeps about 17 objects alive for its pending read, made anew
for each message, so with thousands of workers every collection pass of the coordinator walked
them all (75,000-92,000 objects a young pass at 4,000 workers, 80 % of it these), and a pass holds
every thread of its process, the users' calls included (docs/decisions/worker-relay.md). Here
the streams' objects and their passes are this process's; the coordinator holds one socket.

What the relay checks itself, before anything crosses: the workers' token (the same interceptor
as the coordinator's port), TLS and client certificates (the same credentials), and that the
first message parses as a Register. The peer address and the client certificate cross with the
Register, for the coordinator's identity checks.

    python -m coordinator.edge.relay --link PATH --listen HOST:PORT   (settings: RINGLEADER_RELAY_*)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import signal
import struct

import grpc
from google.protobuf.message import DecodeError

from coordinator.shell.gcpace import tune_collector
from coordinator.edge import relay_link as link
from coordinator.edge.auth import Access, AuthInterceptor
from coordinator.edge.hop import retrieved
from ringleader.grpc_options import SERVER_OPTIONS
from ringleader.security import ServerSecurity, TlsFiles
from ringleader.v1 import workers_pb2 as wpb

log = logging.getLogger("ringleader.relay")

SERVICE = "ringleader.v1.WorkerService"
# A heartbeat is field 2 of WorkerMessage's oneof, length-delimited: its bytes start with this tag.
HEARTBEAT_TAG = b"\x12"
ALIVE_S = 0.25  # the unchanged heartbeats of this long cross the link as one ALIVE frame
SETTINGS_ENV = "RINGLEADER_RELAY_SETTINGS"  # JSON: the workers' token and the TLS files (not on argv)
_ACCEPTED = object()


class Relay:
    def __init__(self, listen: str, security: ServerSecurity) -> None:
        self.listen, self.security = listen, security
        self.streams: dict[int, asyncio.Queue] = {}
        self._beat: dict[int, bytes] = {}  # per stream: the last heartbeat sent on as a MESSAGE
        self._alive: set[int] = set()  # streams whose heartbeat came again unchanged since the last ALIVE
        self._ids = itertools.count(1)
        self.link: link.LinkProtocol | None = None
        self.lost = asyncio.Event()
        self.told_to_stop = False  # a link lost without STOP: the coordinator died

    async def run(self, path: str) -> None:
        loop = asyncio.get_running_loop()
        _, self.link = await loop.create_unix_connection(lambda: link.LinkProtocol(self._on_frame, self._on_lost), path)
        # A port already taken fails here, rather than sharing it (SERVER_OPTIONS says why).
        server = grpc.aio.server(options=SERVER_OPTIONS,
                                 interceptors=[AuthInterceptor(Access("", self.security.workers_token))])
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            SERVICE, {"Connect": grpc.stream_stream_rpc_method_handler(self.connect)}),))  # bytes both ways
        credentials = self.security.grpc_credentials()
        try:
            port = server.add_secure_port(self.listen, credentials) if credentials else server.add_insecure_port(self.listen)
        except RuntimeError:  # grpc's bind failure (its C core logged the reason, "Address already in use")
            port = 0
        if port == 0:
            self.link.send(link.FAILED, 0, f"cannot listen on {self.listen} (is the port taken?)".encode())
            self.link.flush()
            raise SystemExit(2)
        await server.start()
        self.link.send(link.HELLO, 0, str(port).encode())
        beats = asyncio.create_task(self._send_alive())
        await self.lost.wait()  # the coordinator closed the link, or is gone: so are we
        beats.cancel()
        await server.stop(0)

    def _on_frame(self, kind: int, sid: int, payload: bytes) -> None:
        if kind == link.STOP:
            self.told_to_stop = True
            return
        out = self.streams.get(sid)
        if out is None:
            return  # a stream that has ended meanwhile
        if kind == link.OUT:
            out.put_nowait(payload)
        elif kind == link.ACCEPTED:
            out.put_nowait(_ACCEPTED)
        elif kind == link.END:
            out.put_nowait(None)
        elif kind == link.ABORT:
            out.put_nowait(json.loads(payload))

    def _on_lost(self, exc: Exception | None) -> None:
        self.lost.set()
        for out in self.streams.values():
            out.put_nowait(None)

    async def connect(self, request_iterator, context):
        first = await context.read()
        try:
            kind = wpb.WorkerMessage.FromString(first).WhichOneof("msg") if first is not grpc.aio.EOF else None
        except DecodeError:
            kind = None
        if kind != "register":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "register: the first message must be Register")
        sid, out = next(self._ids), asyncio.Queue()
        self.streams[sid] = out
        pems = (context.auth_context() or {}).get("x509_pem_cert") or []
        meta = {"peer": context.peer(), "pem": [p.decode() for p in pems]}
        self.link.send(link.REGISTER, sid, link.register_payload(meta, first))
        reader = writer = None
        why = "stream closed by the worker"
        try:
            verdict = await out.get()
            if verdict is not _ACCEPTED:
                await _abort(context, verdict or {"code": grpc.StatusCode.UNAVAILABLE.value[0],
                                                  "details": "the coordinator is gone: reconnect"})
            reader = asyncio.create_task(self._read(sid, context))
            writer = asyncio.create_task(_write(context, out))
            await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
            if reader.done() and reader.exception():
                why = f"stream broken ({type(reader.exception()).__name__})"
            elif writer.done() and not writer.cancelled() and not writer.exception() \
                    and isinstance(writer.result(), dict):  # (a write fails once the worker has gone)
                await _abort(context, writer.result())
        except asyncio.CancelledError:
            why = "stream cancelled"
            raise
        finally:
            for task in (reader, writer):
                if task is not None:
                    task.cancel()
                    task.add_done_callback(retrieved)
            del self.streams[sid]
            self._beat.pop(sid, None)
            self._alive.discard(sid)
            self.link.send(link.GONE, sid, why.encode())

    async def _read(self, sid: int, context) -> None:
        """The worker's messages, in order, to the coordinator. A heartbeat equal byte for byte to
        the last one sent on (an idle worker's, each second) says only that the worker lives: it
        joins the next ALIVE frame instead of crossing, and being applied, on its own."""
        send, beat, alive = self.link.send, self._beat, self._alive
        while (msg := await context.read()) is not grpc.aio.EOF:
            if msg[:1] == HEARTBEAT_TAG:
                if beat.get(sid) == msg:
                    alive.add(sid)
                    continue
                beat[sid] = msg
            send(link.MESSAGE, sid, msg)

    async def _send_alive(self) -> None:
        while True:
            await asyncio.sleep(ALIVE_S)
            if self._alive:  # emptied in place: each stream's reader holds this set
                sids = list(self._alive)
                self._alive.clear()
                self.link.send(link.ALIVE, 0, struct.pack(f"!{len(sids)}I", *sids))


async def _write(context, out: asyncio.Queue):
    """The coordinator's messages to the worker, until it ends the stream (None) or aborts it (dict)."""
    while True:
        msg = await out.get()
        if msg is None or isinstance(msg, dict):
            return msg
        await context.write(msg)


async def _abort(context, verdict: dict) -> None:
    if verdict.get("trailing"):
        context.set_trailing_metadata(tuple(tuple(kv) for kv in verdict["trailing"]))
    await context.abort(_CODES[verdict["code"]], verdict["details"])


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def settings_env(security: ServerSecurity) -> str:
    """The relay's share of the coordinator's security, for SETTINGS_ENV."""
    tls = security.tls
    return json.dumps({"workers_token": security.workers_token, "cert": tls.cert, "key": tls.key, "ca": tls.ca})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m coordinator.edge.relay")
    ap.add_argument("--link", required=True)
    ap.add_argument("--listen", required=True)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s relay: %(message)s")
    s = json.loads(os.environ.pop(SETTINGS_ENV, "{}") or "{}")
    security = ServerSecurity(workers_token=s.get("workers_token", ""),
                              tls=TlsFiles(cert=s.get("cert", ""), key=s.get("key", ""), ca=s.get("ca", ""),
                                           ca_flag="--tls-client-ca"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the coordinator stops it (its link closes), not the terminal
    tune_collector(pace_s=0, full_passes=True)  # no passes on a clock where the streams are: coordinator/shell/gcpace.py
    relay = Relay(a.listen, security)
    try:
        asyncio.run(relay.run(a.link))
    finally:
        if relay.lost.is_set() and not relay.told_to_stop:  # the coordinator died: no one else removes its link
            _remove_link(a.link)


def _remove_link(path: str) -> None:
    """The link's socket and its directory, which a coordinator killed outright leaves behind."""
    where = os.path.dirname(path)
    if os.path.basename(where).startswith("ringleader-relay-"):
        for leftover in (lambda: os.unlink(path), lambda: os.rmdir(where)):
            try:
                leftover()
            except OSError:
                pass  # removed by the coordinator's own stop already


if __name__ == "__main__":
    main()
