"""Server-Sent Events for the REST API: frames, keep-alives, and the fan-out of live events."""

from __future__ import annotations

import asyncio
import json
from typing import AsyncIterator, Callable

from dashboard.schemas import json_safe
from ringleader.jsonview import to_json
from ringleader.v1 import jobs_pb2 as pb

LIVE_QUEUE = 1000  # events buffered per /api/v1/events client; a client this far behind is dropped


def sse_frame(event: pb.JobEvent, data: dict, with_id: bool = True) -> str:
    lines = [f"event: {event.WhichOneof('event') or 'message'}"]
    if with_id and event.seq:  # progress events are not stored and have no seq
        lines.append(f"id: {event.seq}")
    lines.append("data: " + json.dumps(json_safe(data), separators=(",", ":")))
    return "\n".join(lines) + "\n\n"


def last_event_id(header: str | None) -> int | None:
    try:
        return int(header) if header else None
    except ValueError:
        return None


async def aiter_list(items: list[str]) -> AsyncIterator[str]:
    for item in items:
        yield item


async def with_keepalive(source: AsyncIterator[str], interval: float) -> AsyncIterator[str]:
    """`source`, with a comment line whenever it is silent for `interval` seconds."""

    async def step() -> tuple[bool, str]:
        try:
            return True, await anext(source)
        except StopAsyncIteration:
            return False, ""

    pending: asyncio.Task | None = None
    try:
        while True:
            pending = pending or asyncio.ensure_future(step())
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield ": keep-alive\n\n"
                continue
            more, item = pending.result()
            pending = None
            if not more:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
        await source.aclose()  # type: ignore[attr-defined]


class LiveFanout:
    """One Coordinator listener that copies every event to each connected client's queue."""

    def __init__(self, summary: Callable[[pb.Job], dict], maxsize: int = LIVE_QUEUE) -> None:
        self.summary = summary
        self.maxsize = maxsize
        self.clients: set[asyncio.Queue] = set()

    def publish(self, event: pb.JobEvent, job: pb.Job) -> None:
        if not self.clients:
            return
        frame = sse_frame(event, {"event": to_json(event), "job": self.summary(job)}, with_id=False)
        for q in list(self.clients):
            try:
                q.put_nowait(frame)
            except asyncio.QueueFull:  # too slow: drop it rather than buffer without bound
                self.clients.discard(q)
                while not q.empty():
                    q.get_nowait()
                q.put_nowait(None)

    async def frames(self) -> AsyncIterator[str]:
        q: asyncio.Queue = asyncio.Queue(self.maxsize)
        self.clients.add(q)
        try:
            yield ": listening\n\n"  # the client knows from here on that it misses nothing
            while (frame := await q.get()) is not None:
                yield frame
        finally:
            self.clients.discard(q)
