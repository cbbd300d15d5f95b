"""The stall watch (coordinator/shell/stallwatch.py) names what stalled the loop: a callback that
holds it (its stack), garbage collection (its passes), and stays quiet on a loop that runs."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import NamedTuple

from coordinator.core.load import LagMeter
from coordinator.shell.stallwatch import StallWatch


def hold_the_loop(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def collect_for(seconds: float) -> int:
    """Full collections over a heap of many objects, for at least `seconds`; the passes made."""
    heap = [[(i, str(i))] for i in range(300_000)]
    end, passes = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        gc.collect()
        passes += 1
    del heap
    return passes


class RecordingWatch(StallWatch):
    """The stall watch, keeping each stall it reports: (began, ended, worst) in perf_counter s."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reported: list[tuple[float, float, float]] = []

    def report(self, began, ended, worst, stacks) -> None:
        self.reported.append((began, ended, worst))
        super().report(began, ended, worst, stacks)


class Run(NamedTuple):
    watch: RecordingWatch
    wakes: list[float]  # perf_counter of each turn of a 5 ms ticker on the loop: its gaps are real stalls
    wall_s: float


async def watched(stall, quiet_s: float = 0.3) -> Run:
    lag = LagMeter(shed_lag_s=0)
    watch = RecordingWatch(lag, threshold_s=0.1, period_s=0.01)
    wakes: list[float] = []

    async def tick() -> None:
        while True:
            wakes.append(time.perf_counter())
            await asyncio.sleep(0.005)

    began = time.perf_counter()
    lag.start()
    watch.start()
    ticker = asyncio.create_task(tick())
    try:
        await asyncio.sleep(0.2)
        stall()  # on the loop's thread, inside one of its callbacks
        await asyncio.sleep(quiet_s)  # the loop runs again: the watch reports
    finally:
        ticker.cancel()
        watch.stop()
        await lag.stop()
    return Run(watch, wakes, time.perf_counter() - began)


def stall_lines(caplog, *needles: str) -> list[str]:
    """The stall warnings that hold every needle. A loaded machine can stall the loop too (the
    operating system not running it): those are real stalls, reported as well, and not ours."""
    return [m for r in caplog.records if "stalled" in (m := r.getMessage()) and all(n in m for n in needles)]


def test_a_callback_that_holds_the_loop_is_named_with_its_stack(caplog):
    caplog.set_level(logging.WARNING, "ringleader.coordinator")
    run = asyncio.run(watched(lambda: hold_the_loop(0.4)))
    (line,) = [m for m in stall_lines(caplog) if m.split("samples:\n")[-1].split("\n")[0].endswith(" hold_the_loop")]
    innermost = line.split("samples:\n")[1].split("\n")[0]
    assert "test_stallwatch.py" in innermost
    ms = int(line.split("stalled ")[1].split(" ms")[0])
    # The 0.4 s hold, less the threshold and a sampling period; never longer than the whole run.
    assert 250 <= ms <= run.wall_s * 1e3, line


def test_garbage_collection_inside_a_stall_is_counted(caplog):
    caplog.set_level(logging.WARNING, "ringleader.coordinator")
    passes = []
    run = asyncio.run(watched(lambda: passes.append(collect_for(0.4))))
    assert run.watch.stalls >= 1
    lines = [m for m in stall_lines(caplog, "garbage collection ") if " passes" in m]
    line = max(lines, key=lambda m: int(m.split("garbage collection ")[1].split(" ms")[0]))
    gc_ms = int(line.split("garbage collection ")[1].split(" ms")[0])
    assert gc_ms >= 200, line  # most of the 0.4 s was collection
    counted = int(line.split(" passes")[0].rsplit(" ", 1)[1])
    assert counted >= passes[0] and "2]" in line.split("generations [")[1]  # the full ones, and the heap's own


def test_a_loop_that_runs_is_not_reported(caplog):
    """Quiet unless the loop really was held: a 30 ms callback is no stall, and every stall the
    watch reports (a loaded machine may not run the loop for longer than the threshold) is one
    the loop's own ticker saw as a gap of its turns."""
    caplog.set_level(logging.WARNING, "ringleader.coordinator")
    run = asyncio.run(watched(lambda: hold_the_loop(0.03), quiet_s=0.5))
    assert run.watch.stalls == len(run.watch.reported) == len(stall_lines(caplog))
    gaps = [(a, b) for a, b in zip(run.wakes, run.wakes[1:]) if b - a >= run.watch.threshold_s * 0.9]
    for began, ended, worst in run.watch.reported:
        assert any(a <= ended and b >= began for a, b in gaps), (began, ended, worst, gaps)


def test_the_bench_reads_the_warning_as_the_coordinator_logs_it(caplog):
    """bench/control_plane.py counts the stalls of its measured window from the coordinator's log
    (bench/loadstats.py): the warning's wording and the log's format must stay readable to it."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench import loadstats

    caplog.set_level(logging.WARNING, "ringleader.coordinator")
    since = time.time()
    asyncio.run(watched(lambda: collect_for(0.3)))
    form = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")  # ringleader_app/cli.py's
    log = "\n".join(form.format(r) for r in caplog.records)
    found = max(loadstats.stalls(log, since - 1, time.time() + 1), key=lambda f: f["gc_ms"])  # the collection's
    (message,) = stall_lines(caplog, f"garbage collection {found['gc_ms']} ms ")
    assert message.startswith(f"event loop stalled {found['ms']} ms: garbage collection {found['gc_ms']} ms "), found
    assert found["gc_ms"] >= 100 and found["what"] in message and "generation" in found["what"]
    assert loadstats.stalls(log, time.time() + 5) == []  # outside the window



async def watch_while(scenario, period_s: float = 0.01) -> StallWatch:
    lag = LagMeter(shed_lag_s=0)
    watch = StallWatch(lag, threshold_s=0.1, period_s=period_s)
    lag.start()
    watch.start()
    try:
        await scenario(lag)
    finally:
        watch.stop()
        await lag.stop()
    return watch


def test_a_stall_the_watch_never_saw_is_reported_from_the_loops_own_sample(caplog):
    """A collection pass holds the watch's thread too: when it ends in another thread, the loop may
    take its overdue sample before the watch looks, and then nothing is late when it does. The
    loop's sample measured the stall, so it is reported from that (here a lag of 0.4 s recorded as
    the loop's sample would record it, with the loop never held: no look of the watch could see it)."""
    caplog.set_level(logging.WARNING, "ringleader.coordinator")

    async def scenario(lag: LagMeter) -> None:
        await asyncio.sleep(0.2)
        lag.record(0.4)
        await asyncio.sleep(0.3)

    watch = asyncio.run(watch_while(scenario))
    assert watch.stalls == 1
    (line,) = [r.getMessage() for r in caplog.records if "stalled" in r.getMessage()]
    assert line.startswith("event loop stalled 400 ms: ") and "no stack sampled" in line, line


def test_a_stall_of_the_grpc_edge_loop_is_named_as_such(caplog):
    """Without the worker relay the workers' streams are served on the gRPC edge's loop (its own
    thread): a callback that holds it holds every user call while the core loop runs on, so the
    edge is watched too, and the warning says which loop stalled and where."""
    from coordinator.edge.hop import EdgeLoop

    caplog.set_level(logging.WARNING, "ringleader.coordinator")
    edge = EdgeLoop()
    try:
        edge.watch_stalls(0.1)
        time.sleep(0.3)  # its sampler runs
        edge.loop.call_soon_threadsafe(hold_the_loop, 0.4)
        time.sleep(0.6)
    finally:
        edge.close()
    assert edge.stalls is not None and edge.stalls.stalls == 1
    (line,) = [r.getMessage() for r in caplog.records if "stalled" in r.getMessage()]
    assert "the gRPC edge loop's stack" in line and line.split("samples:\n")[1].split("\n")[0].endswith(" hold_the_loop")
