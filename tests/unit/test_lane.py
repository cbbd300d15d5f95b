"""The core loop's lane (coordinator/edge/hop.py): clients take turns, so one client's burst of
calls does not hold another's behind it."""

import asyncio

from coordinator.edge.hop import Lane


def served_order(puts: list[str], limit: int = 0) -> list[str]:
    """Start what `puts` names (a client key each, in arrival order) and say the order run."""
    async def main() -> list[str]:
        lane, order = Lane(asyncio.get_running_loop()), []
        for i, key in enumerate(puts):
            lane.put(lambda key=key, i=i: order.append(f"{key}{i}"), key)
        lane.run(limit)
        return list(order)  # the puts' own wake-ups run the rest after this

    return asyncio.run(main())


def test_a_users_call_behind_a_burst_of_another_clients_starts_next():
    order = served_order(["bulk"] * 32 + ["user"])
    assert order.index("user32") == 1  # after the one bulk body running, not after all 32
    assert [o for o in order if o.startswith("bulk")] == [f"bulk{i}" for i in range(32)]  # each client in order


def test_clients_take_turns_and_a_limit_counts_every_start():
    order = served_order(["a", "a", "a", "b", "b", "c"], limit=4)
    assert order == ["a0", "b3", "c5", "a1"]
    assert served_order(["a", "a", "a", "b", "b", "c"]) == ["a0", "b3", "c5", "a1", "b4", "a2"]


def test_a_start_that_puts_more_is_served_in_its_clients_turn():
    async def main() -> list[str]:
        lane, order = Lane(asyncio.get_running_loop()), []

        def first() -> None:
            order.append("a0")
            lane.put(lambda: order.append("a-later"), "a")  # a body that hops again

        lane.put(first, "a")
        lane.put(lambda: order.append("b0"), "b")
        lane.run()
        return order

    assert asyncio.run(main()) == ["a0", "b0", "a-later"]


def test_the_lanes_own_turn_gives_the_loop_back_after_its_budget():
    """The lane's own turn stops starting bodies once LANE_TURN_S has passed and takes another
    turn after the callbacks already due (the worker inbox's): a burst of slow calls ran in one
    callback of 20-30 ms while the inbox waited."""
    import time

    from coordinator.edge.hop import LANE_TURN_S

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        lane, order = Lane(loop), []

        def slow(i: int) -> None:
            time.sleep(0.002)
            order.append(f"call{i}")

        for i in range(10):
            lane.put(lambda i=i: slow(i), "bulk")
        loop.call_soon(lambda: order.append("inbox"))  # due behind the lane's first turn
        while len(order) < 11:
            await asyncio.sleep(0)
        return list(order)

    order = asyncio.run(main())
    assert [o for o in order if o != "inbox"] == [f"call{i}" for i in range(10)]
    assert order.index("inbox") <= int(LANE_TURN_S / 0.002) + 1  # after the first turn's few, not all ten


def test_a_checkpoints_share_leaves_the_rest_a_turn_of_its_own():
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        lane, order = Lane(loop), []
        for i in range(5):
            lane.put(lambda i=i: order.append(f"c{i}"), "a")
        lane.run(2)  # an inbox checkpoint's share
        assert order == ["c0", "c1"]
        while len(order) < 5:
            await asyncio.sleep(0)
        return order

    assert asyncio.run(main()) == [f"c{i}" for i in range(5)]
