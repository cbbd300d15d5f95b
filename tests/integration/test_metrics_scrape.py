"""/metrics renders off the core loop (dashboard/app.py): a scrape that takes long (a draining
fleet's: 30-51 ms measured with 2,000 simulated workers) no longer holds every other call for as
long; and the collectors' reads of the live state survive the core changing it meanwhile."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import pytest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from coordinator.core.liveness import Timings
from coordinator.edge.scrape import live
from ringleader.app.process import CoordinatorConfig, RunningCoordinator

pytestmark = pytest.mark.integration

RENDER_S = 0.3  # the slow collector's CPU per scrape, holding the GIL like a big render does


class _Slow(Collector):
    def collect(self):
        end = time.perf_counter() + RENDER_S
        while time.perf_counter() < end:  # pure Python: the GIL is held, given up each switch interval
            pass
        yield GaugeMetricFamily("test_slow_render", "a render as slow as a big fleet's", value=1.0)


async def _longest_gap_during_scrape(tmp_path) -> tuple[float, str]:
    config = CoordinatorConfig(grpc_address="127.0.0.1:0", http_address="127.0.0.1:0", db=str(tmp_path / "jobs.db"),
                               timings=Timings(shed_lag_s=0.0))
    async with RunningCoordinator(config) as rc:
        rc.metrics.registry.register(_Slow())
        loop = asyncio.get_running_loop()
        scrape = loop.run_in_executor(None, lambda: urllib.request.urlopen(rc.http_url + "/metrics", timeout=30).read())
        longest, last = 0.0, time.perf_counter()
        while not scrape.done():  # the core loop's turns while the scrape runs
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            longest, last = max(longest, now - last), now
        return longest, (await scrape).decode()


def test_a_slow_scrape_does_not_hold_the_core_loop(tmp_path):
    longest, body = asyncio.run(_longest_gap_during_scrape(tmp_path))
    assert "test_slow_render 1.0" in body
    # On the loop, the render held it RENDER_S whole; on a thread, the loop runs every switch
    # interval or so (5 ms; the bound leaves room for a loaded machine).
    assert longest < RENDER_S / 3, f"the core loop stood still {longest * 1e3:.0f} ms during a scrape"


def test_a_live_read_is_read_again_when_its_state_changes_under_it():
    attempts = []

    def read():
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("dictionary changed size during iteration")
        if len(attempts) == 2:
            raise KeyError("w7")  # a worker gone between the sorted keys and the dict
        return 42
    assert live(read) == 42 and len(attempts) == 3
    with pytest.raises(KeyError):
        live(lambda: {}["gone"], attempts=2)
