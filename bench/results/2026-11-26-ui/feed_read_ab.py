"""The fleet feed's read of 5,000 workers, before (FLEET_VIEW_OLD: `git show fc2df98:dashboard/fleet_view.py`)
and after 865a85a, alternated on one facade; asserts both give the same records.
    FLEET_VIEW_OLD=/tmp/old.py PYTHONPATH=$PWD python bench/results/2026-11-26-ui/feed_read_ab.py
"""
import asyncio, time, os, sys, importlib.util
sys.path.insert(0, "tests/unit")
from test_fleet_feed import register, Clock
from coordinator.core.facade import Coordinator
from coordinator.store.memory import MemoryJobStore
import dashboard.fleet_view as new
spec = importlib.util.spec_from_file_location("fleet_view_old", os.environ["FLEET_VIEW_OLD"])
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)

async def main():
    core = Coordinator(MemoryJobStore())
    for i in range(5000):
        register(core, f"sim-h{i//8:04}-d{i%8}", f"sim-h{i//8:04}", i % 8)
    clock = Clock()
    feeds = {"old": old.FleetFeed(core, clock), "new": new.FleetFeed(core, clock)}
    t = {k: [] for k in feeds}
    for _ in range(15):
        for k, f in feeds.items():
            clock.tick(); t0 = time.perf_counter(); f.read(); t[k].append((time.perf_counter() - t0) * 1000)
    assert feeds["old"].records == feeds["new"].records
    for k, v in t.items():
        v.sort(); print(k, "read ms median", round(v[len(v)//2], 1), "range", round(v[0], 1), round(v[-1], 1))
    print(os.getloadavg())
asyncio.run(main())
