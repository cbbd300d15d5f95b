"""FleetHealth.all_workers_paced: RunCheck lists the fleet a page per turn of the loop (5,000
workers listed at once held the loop 40-60 ms), and gets the whole listing."""

import asyncio

from coordinator.shell.facade import Coordinator
from coordinator.store.memory import MemoryJobStore
from test_facade import Worker


def test_a_paced_listing_is_the_whole_listing_and_the_loop_turns_between_its_pages():
    async def main():
        core = Coordinator(MemoryJobStore())
        for i in range(23):
            Worker(core, f"w{i:02}", i)
        turns = [0]

        async def other_work() -> None:
            while True:
                turns[0] += 1
                await asyncio.sleep(0)

        other = asyncio.ensure_future(other_work())
        await asyncio.sleep(0)
        before = turns[0]
        paced = await core.fleet.all_workers_paced(page=5)
        between = turns[0] - before
        other.cancel()
        return paced, core.fleet.all_workers(), between

    paced, whole, between = asyncio.run(main())
    assert len(whole) == 23 and [w.worker_id for w in paced] == [w.worker_id for w in whole]
    assert [w.health for w in paced] == [w.health for w in whole]
    assert between >= 4  # five pages, and other work ran between them
