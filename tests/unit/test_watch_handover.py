"""coordinator/edge/watch.Handover between two real loops (the core here, the edge on a thread of
its own, as the coordinator runs them): the events one core turn publishes cross to the edge
together at the end of that turn, and a terminal event crosses at once, with those before it."""

from __future__ import annotations

import asyncio
import threading
import time

from coordinator.edge.watch import Handover
from ringleader.v1 import jobs_pb2 as pb

HELD_S = 0.2  # the rest of a core turn, held after an event is published


class Arrivals:
    """Stands in for the watch's edge queue: when each event reached the edge loop."""

    def __init__(self) -> None:
        self.seen: list = []

    def put_nowait(self, event) -> None:
        self.seen.append((time.perf_counter(), event))


def _hold(seconds: float) -> float:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    return time.perf_counter()


def test_a_turns_events_cross_together_and_the_end_at_once():
    edge = asyncio.new_event_loop()
    thread = threading.Thread(target=edge.run_forever, daemon=True)
    thread.start()
    result = pb.JobEvent(job_id="j", result=pb.SizeResult(size_bytes=8))
    end = pb.JobEvent(job_id="j", state=pb.StateChange(state=pb.SUCCEEDED))
    progress = pb.JobEvent(job_id="j", progress=pb.Progress(done=1, total=2))

    async def main() -> dict:
        core, out = asyncio.get_running_loop(), {}
        ending, ongoing = Arrivals(), Arrivals()
        hand, other = Handover(core, edge, ending), Handover(core, edge, ongoing)
        turn = core.create_future()

        def one_turn() -> None:  # one callback of the core: a result, then the end, then more work
            hand(result)
            out["end_published"] = _hold(HELD_S)
            hand(end)
            other(progress)
            out["turn_over"] = _hold(HELD_S)
            turn.set_result(None)
        core.call_soon(one_turn)
        await turn
        for _ in range(200):
            await asyncio.sleep(0.01)
            if len(ending.seen) == 2 and ongoing.seen:
                break
        out["ending"], out["ongoing"] = ending.seen, ongoing.seen
        return out
    try:
        out = asyncio.run(main())
    finally:
        edge.call_soon_threadsafe(edge.stop)
        thread.join(5)
        edge.close()
    (t_result, first), (t_end, last) = out["ending"]
    assert (first, last) == (result, end), "in the order published"
    assert t_result >= out["end_published"], "the result crossed alone, mid-turn, ahead of the end"
    assert t_end < out["turn_over"], "the end waited for the core's turn to be over"
    (t_progress, only), = out["ongoing"]
    assert only == progress and t_progress >= out["turn_over"], "a turn's other events cross at its end"
