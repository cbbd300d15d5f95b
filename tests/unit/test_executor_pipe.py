"""worker/supervisor.PipeReader: the daemon's loop reads its executor's pipe itself, over a real
multiprocessing pipe (the executor's end written as worker/executor.py writes it)."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import struct

from worker import api
from worker.supervisor import PipeReader


async def _until(got: list, n: int, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while len(got) < n:
        assert asyncio.get_running_loop().time() < deadline, got
        await asyncio.sleep(0.001)


def test_messages_arrive_whole_in_order_then_the_end():
    async def main():
        parent, child = mp.Pipe()
        got: list = []
        reader = PipeReader(parent.fileno(), asyncio.get_running_loop(), got.append)
        big = api.Done("j", ok=True, log="x" * 300_000)  # over the pipe's buffer: read in many pieces
        sent = [api.Progress("j", 0, 2, 8), api.Result("j", b"\x01" * 20_000), big, api.StoreReady("j", "g", 5)]
        for msg in sent:
            await asyncio.to_thread(child.send, msg)  # a big one blocks its writer until read
        await _until(got, len(sent))
        assert got == sent
        child.close()
        await _until(got, len(sent) + 1)
        assert isinstance(got[-1], api.Exited)
        reader.close()
        parent.close()
    asyncio.run(main())


def test_a_message_half_written_never_blocks_the_loop():
    """An executor stopped (or killed) in the middle of a send: the loop keeps running, the
    message is delivered once whole, and a pipe that ends mid-message ends with Exited."""
    async def main():
        parent, child = mp.Pipe()
        got: list = []
        reader = PipeReader(parent.fileno(), asyncio.get_running_loop(), got.append)
        import pickle
        payload = pickle.dumps(api.Progress("j", 1, 2, 8))
        frame = struct.pack("!i", len(payload)) + payload
        os.write(child.fileno(), frame[:2])  # half the length
        ticks = 0
        for _ in range(20):  # the loop turns while the rest is missing
            await asyncio.sleep(0.001)
            ticks += 1
        assert ticks == 20 and got == []
        os.write(child.fileno(), frame[2:9])
        await asyncio.sleep(0.01)
        assert got == []
        os.write(child.fileno(), frame[9:] + frame[:5])  # the rest, then the start of the next one
        await _until(got, 1)
        assert got == [api.Progress("j", 1, 2, 8)]
        child.close()  # gone mid-message
        await _until(got, 2)
        assert isinstance(got[1], api.Exited)
        reader.close()
        parent.close()
    asyncio.run(main())
