"""coordinator/edge/hop.py's `on`: a coroutine run on another thread's loop, awaited from this one:
its result and its exception come back, and a wait that ends cancels the body there (a cancelled
RPC cancels its core task), whether the body had started or not."""

from __future__ import annotations

import asyncio
import threading

import pytest

from coordinator.edge.hop import EdgeLoop, on


def run_on_edge(scenario) -> object:
    """`scenario(other_loop)` awaited on this thread's loop, `other_loop` another thread's."""
    async def main():
        other = EdgeLoop()
        try:
            return await scenario(other.loop)
        finally:
            other.close()
    return asyncio.run(main())


def test_the_result_and_the_exception_come_back_from_the_other_thread():
    async def body(x):
        return x, threading.current_thread().name

    async def fails():
        raise KeyError("gone")

    async def scenario(other):
        answer = await on(other, body(7))
        with pytest.raises(KeyError, match="gone"):
            await on(other, fails())
        return answer

    assert run_on_edge(scenario) == (7, "grpc-edge")


def test_a_wait_cancelled_cancels_the_body_on_the_other_loop():
    started, cancelled = threading.Event(), threading.Event()

    async def body():
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def scenario(other):
        wait = asyncio.ensure_future(on(other, body()))
        await asyncio.to_thread(started.wait, 5)
        wait.cancel()
        with pytest.raises(asyncio.CancelledError):
            await wait
        return await asyncio.to_thread(cancelled.wait, 5)

    assert run_on_edge(scenario)


def test_a_wait_cancelled_before_the_body_starts_never_runs_it():
    ran = []

    async def body():
        ran.append(1)

    async def scenario(other):
        gate = threading.Event()
        other.call_soon_threadsafe(gate.wait, 5)  # the other loop is busy until the gate opens
        wait = on(other, body())
        wait.cancel()
        gate.set()
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(asyncio.sleep(0.05), other))
        return wait.cancelled(), ran

    assert run_on_edge(scenario) == (True, [])
