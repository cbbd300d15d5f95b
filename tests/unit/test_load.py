"""coordinator/core/load.py: the intake gate puts users' calls ahead of a burst of worker
messages, first come first served; the lag meter says when to shed and for how long."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.core.load import IntakeGate, LagMeter
from ringleader.errors import Overloaded, answer


def run_burst(per_turn: int, n: int = 20) -> list:
    """n worker messages arrive at once, then a user's call: the order they are served in."""
    served: list = []

    async def worker_message(gate: IntakeGate, i: int) -> None:
        if not gate.take():
            await gate.wait()
        served.append(i)

    async def user_call() -> None:
        served.append("user")

    async def main() -> None:
        gate = IntakeGate(per_turn)
        tasks = [asyncio.create_task(worker_message(gate, i)) for i in range(n)]
        tasks.append(asyncio.create_task(user_call()))
        await asyncio.gather(*tasks)

    asyncio.run(main())
    return served


def test_a_user_call_waits_behind_one_turn_of_worker_messages_not_the_whole_burst():
    assert run_burst(per_turn=0) == [*range(20), "user"]  # unbounded: behind every message
    served = run_burst(per_turn=4)
    assert served.index("user") == 4
    assert [s for s in served if s != "user"] == list(range(20))  # every message, in arrival order


def test_a_reader_that_goes_away_while_waiting_takes_no_room():
    async def main() -> list[int]:
        gate, served = IntakeGate(2), []

        async def message(i: int) -> None:
            if not gate.take():
                await gate.wait()
            served.append(i)

        tasks = [asyncio.create_task(message(i)) for i in range(6)]
        await asyncio.sleep(0)  # 0 and 1 served, 2-5 waiting
        tasks[2].cancel()  # its stream ended
        await asyncio.gather(*tasks, return_exceptions=True)
        return served

    assert asyncio.run(main()) == [0, 1, 3, 4, 5]


def test_the_lag_meter_sheds_past_its_threshold_and_says_when_to_come_back():
    meter = LagMeter(shed_lag_s=0.5, window_s=1.0)
    meter.record(0.1, now=100.0)
    meter.check("submit", now=100.0)  # under the threshold: nothing
    meter.record(0.8, now=100.2)
    with pytest.raises(Overloaded) as err:
        meter.check("submit", now=100.3)
    assert err.value.retry_after_s == 2 and "submit" in str(err.value) and "0.8 s behind" in str(err.value)
    assert answer(err.value).grpc_code == "RESOURCE_EXHAUSTED" and answer(err.value).http_status == 429
    meter.check("submit", now=101.5)  # the window has passed: accepted again
    assert meter.shed == 1


def test_shedding_off():
    meter = LagMeter(shed_lag_s=0.0)
    meter.record(30.0, now=1.0)
    meter.check("submit", now=1.0)
    assert meter.shed == 0


def test_placement_passes_run_once_per_turn_and_a_slow_pass_spaces_the_next():
    import time

    from coordinator.core.load import PassPacer

    async def main() -> tuple[int, float]:
        runs: list[float] = []
        slow = {"s": 0.05}

        def pass_() -> None:
            runs.append(time.monotonic())
            time.sleep(slow["s"])  # a pass that walks thousands of workers
        pacer = PassPacer(pass_)
        for _ in range(100):  # a hundred inputs in one turn of the loop
            pacer.soon()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(runs) == 1
        slow["s"] = 0.0
        pacer.soon()  # asked at once after a 50 ms pass: waits until 3 x 50 ms have passed
        while len(runs) < 2:
            await asyncio.sleep(0.005)
        return len(runs), runs[1] - runs[0]

    n, gap = asyncio.run(main())
    assert n == 2 and gap >= 0.05 + 3 * 0.05 - 0.01


def test_without_a_loop_a_pass_runs_at_once():
    from coordinator.core.load import PassPacer
    runs = []
    PassPacer(lambda: runs.append(1)).soon()
    assert runs == [1]
