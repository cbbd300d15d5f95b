"""A server stream hopped to the core loop (coordinator/edge/hop.py): its generator runs on the core
one item ahead of the edge's writes, no further; one left early is closed on the core even with a
step in flight; its errors reach the edge."""

from __future__ import annotations

import asyncio
import threading

import pytest

from coordinator.edge.hop import EdgeLoop, _hopped


def _stream(gen_fn, core):
    edge = EdgeLoop()
    return edge, _hopped(gen_fn, core, edge.loop)


def test_the_next_item_is_sought_while_the_edge_writes_this_one_and_no_further():
    log: list[str] = []

    async def items(request, context):
        for k in range(3):
            log.append(f"make {k}")
            yield k

    async def main():
        edge, stream = _stream(items, asyncio.get_running_loop())

        async def consume():
            got = []
            async for k in stream(None, None):
                log.append(f"write {k}")
                await asyncio.sleep(0.2)  # a slow write: the core has time to run ahead
                log.append(f"written {k}")
                got.append(k)
            return got
        try:
            return await edge.run(consume())
        finally:
            edge.close()

    assert asyncio.run(main()) == [0, 1, 2]
    # item k+1 made while k is written (the stream's end too), never two ahead of the writes
    assert [x for x in log if x.startswith("written")] == ["written 0", "written 1", "written 2"]
    assert log.index("make 1") < log.index("written 0") and log.index("make 2") < log.index("written 1")
    assert log.index("make 2") > log.index("written 0")


def test_a_stream_left_early_closes_its_generator_on_the_core_with_a_step_in_flight():
    closed: list[str] = []
    stuck = asyncio.Event()

    async def items(request, context):
        try:
            yield "first"
            await stuck.wait()  # the step in flight when the edge leaves
            yield "never"
        finally:
            closed.append(threading.current_thread().name)

    async def main():
        edge, stream = _stream(items, asyncio.get_running_loop())

        async def consume_one():
            agen = stream(None, None)
            first = await agen.__anext__()
            await asyncio.sleep(0.05)  # the next step is now waiting on the core
            await agen.aclose()  # the client went away
            return first
        try:
            return await edge.run(consume_one())
        finally:
            edge.close()

    assert asyncio.run(main()) == "first"
    assert closed == [threading.main_thread().name]  # finally ran, once, on the core's thread


def test_an_error_of_the_generator_reaches_the_edge():
    async def items(request, context):
        yield 1
        raise LookupError("no such job")

    async def main():
        edge, stream = _stream(items, asyncio.get_running_loop())

        async def consume():
            got = []
            with pytest.raises(LookupError, match="no such job"):
                async for k in stream(None, None):
                    got.append(k)
            return got
        try:
            return await edge.run(consume())
        finally:
            edge.close()

    assert asyncio.run(main()) == [1]
