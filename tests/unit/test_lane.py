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


def test_the_lanes_own_turn_ends_with_what_waited_as_it_began():
    """Calls that come while the lane's turn runs wait for their own turn (each put asks for one),
    so other callbacks of the loop (the worker inbox) run between: a client that answers each
    reply with a new call kept one turn of the lane going."""
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        lane, order = Lane(loop), []

        def call(i: int) -> None:
            order.append(f"call{i}")
            if i < 5:
                lane.put(lambda: call(i + 1), "bulk")  # the next call, as its answer goes out

        lane.put(lambda: call(0), "bulk")
        loop.call_soon(lambda: order.append("inbox"))  # queued behind the lane's first turn
        for _ in range(20):
            await asyncio.sleep(0)
        return list(order)

    order = asyncio.run(main())
    assert order.index("inbox") < order.index("call5")
    assert [o for o in order if o != "inbox"] == [f"call{i}" for i in range(6)]
