"""The link between the coordinator and its worker relay (coordinator/edge/relay.py): frames over
one Unix socket, both ways.

A frame is a header (payload length, kind, stream id) and its payload. The relay numbers the
workers' streams; everything a stream carries crosses as its serialized WorkerMessage bytes, parsed
on the coordinator's side only. Frames are parsed from what each read returns, with no coroutine
per frame, and written a loop turn's worth at a time (one write call, not one per frame): the link
carries every heartbeat of the fleet.
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Callable

HEADER = struct.Struct("!IBI")  # payload bytes, kind, stream id
MAX_FRAME = 64 << 20  # a frame this large is a broken link, not a message (gRPC's own limits are smaller)

# relay -> coordinator
HELLO = 1  # the relay listens: payload its port
REGISTER = 2  # a stream's first message: payload `meta` (JSON, length-prefixed) then the Register's bytes
MESSAGE = 3  # a worker's message, in its stream's order
GONE = 4  # the stream ended: payload why
FAILED = 5  # the relay cannot serve (its port cannot be bound): payload why; it exits
ALIVE = 6  # streams whose heartbeat came again unchanged since the last ALIVE: payload their ids (!I each)
# coordinator -> relay
ACCEPTED = 11  # the registration went through: the stream's messages follow
OUT = 12  # a message for the worker
END = 13  # the coordinator dropped the worker: end its stream
ABORT = 14  # refuse or end the stream with a status: payload JSON {code, details, trailing}
STOP = 15  # the relay is to exit (its link is the coordinator's to remove); a link lost without it: the coordinator died

Handler = Callable[[int, int, bytes], None]


def frame(kind: int, sid: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), kind, sid) + payload


def register_payload(meta: dict, register: bytes) -> bytes:
    head = json.dumps(meta).encode()
    return struct.pack("!I", len(head)) + head + register


def split_register(payload: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack_from("!I", payload)
    return json.loads(payload[4:4 + n]), payload[4 + n:]


def abort_payload(code: int, details: str, trailing: tuple = ()) -> bytes:
    return json.dumps({"code": code, "details": details, "trailing": [list(kv) for kv in trailing]}).encode()


class LinkProtocol(asyncio.Protocol):
    """One end of the link: `on_frame(kind, sid, payload)` for each frame read, in order;
    `on_lost(exc)` once when the link ends. `send` queues a frame, written at the end of the turn."""

    def __init__(self, on_frame: Handler, on_lost: Callable[[Exception | None], None]) -> None:
        self.on_frame, self.on_lost = on_frame, on_lost
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._out: list[bytes] = []

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        at, end = 0, len(buf)
        while end - at >= HEADER.size:
            n, kind, sid = HEADER.unpack_from(buf, at)
            if n > MAX_FRAME:
                self.transport.close()
                return
            if end - at - HEADER.size < n:
                break
            start = at + HEADER.size
            payload = bytes(buf[start:start + n])
            at = start + n
            self.on_frame(kind, sid, payload)
        del buf[:at]

    def send(self, kind: int, sid: int, payload: bytes = b"") -> None:
        if self.transport is None or self.transport.is_closing():
            return  # the link is gone: its end (on_lost) tells the streams
        if not self._out:
            asyncio.get_event_loop().call_soon(self._flush)
        self._out.append(frame(kind, sid, payload))

    def flush(self) -> None:
        """Write what is queued now, not at the end of the turn (before the process exits)."""
        self._flush()

    def _flush(self) -> None:
        out, self._out = self._out, []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))

    def connection_lost(self, exc: Exception | None) -> None:
        self._out.clear()
        self.on_lost(exc)
