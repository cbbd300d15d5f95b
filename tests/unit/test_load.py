"""coordinator/core/load.py: the intake gate, as the workers' inbox uses it, puts users' calls ahead
of a burst of worker messages, first come first served, and a stream's end after its messages;
the lag meter says when to shed and for how long."""

from __future__ import annotations

import asyncio
import time

import pytest

from coordinator.core.load import IntakeGate, LagMeter
from coordinator.edge.worker_stream import _GONE as GONE
from coordinator.edge.worker_stream import Inbox, Outgoing
from ringleader.errors import Overloaded, answer
from ringleader.v1 import workers_pb2 as wpb


class Core:
    """What the inbox calls on the coordinator (coordinator/edge/worker_stream.py): the real gate,
    and a record of what was applied, in order."""

    def __init__(self, per_turn: int) -> None:
        self.intake, self.served = IntakeGate(per_turn), []
        self.stopping = self.closed = False

    def on_message(self, conn, msg) -> None:
        self.served.append(msg.heartbeat.op_seq)

    def disconnect(self, conn, why: str) -> None:
        self.served.append(why)


def heartbeat(i: int) -> wpb.WorkerMessage:
    return wpb.WorkerMessage(heartbeat=wpb.Heartbeat(op_seq=i))


def run_burst(per_turn: int, n: int = 20, budget_s: float | None = None, cost_s: float = 0.0) -> list:
    """n worker messages arrive at once, then a user's call: the order they are served in.
    `budget_s`: the intake's time budget (default: the gate's); `cost_s`: what each message takes
    (a job's end over many ranks costs far more than a heartbeat)."""
    return burst(per_turn, n, budget_s, cost_s).served


def burst(per_turn: int, n: int = 20, budget_s: float | None = None, cost_s: float = 0.0) -> Core:
    """run_burst's core once everything was served (its gate holds what the messages waited)."""
    import time

    async def main() -> Core:
        core = Core(per_turn)
        if budget_s is not None:
            core.intake.budget_s = budget_s
        if cost_s:
            core.on_message = lambda conn, msg: (time.sleep(cost_s), core.served.append(msg.heartbeat.op_seq))
        loop = asyncio.get_running_loop()
        inbox = Inbox(core, identities=None, core=loop, edge=loop, batch_s=0)  # heartbeats wake it at once
        for i in range(n):
            inbox.put("conn", heartbeat(i))
        asyncio.get_running_loop().call_soon(core.served.append, "user")
        while len(core.served) < n + 1:
            await asyncio.sleep(0)
        return core

    return asyncio.run(main())


def test_a_user_call_waits_behind_one_turn_of_worker_messages_not_the_whole_burst():
    assert run_burst(per_turn=0) == [*range(20), "user"]  # unbounded: behind every message
    served = run_burst(per_turn=4)
    assert served.index("user") == 4
    assert [s for s in served if s != "user"] == list(range(20))  # every message, in arrival order


def calls_during_burst(messages: int, at: int, calls: int) -> list:
    """`messages` worker messages arrive at once, with no bound on a turn's messages (only the
    lane's checkpoint can let a call in); while message `at` is applied, `calls` users' calls reach
    the core (coordinator/edge/hop.py's Lane). The order they are served in."""
    from coordinator.edge.hop import lane

    async def main() -> list:
        core = Core(0)
        loop = asyncio.get_running_loop()

        def on_message(conn, msg) -> None:
            core.served.append(msg.heartbeat.op_seq)
            if msg.heartbeat.op_seq == at:  # the calls arrive (on the edge) while this one is applied
                for _ in range(calls):
                    lane(loop).put(lambda: core.served.append("user"))
        core.on_message = on_message
        inbox = Inbox(core, identities=None, core=loop, edge=loop, batch_s=0)
        for i in range(messages):
            inbox.put("conn", heartbeat(i))
        while len(core.served) < messages + calls:
            await asyncio.sleep(0)
        return core.served

    return asyncio.run(main())


def test_a_call_hopped_to_the_core_starts_between_two_worker_messages_not_after_the_turn():
    """A user's call that reaches the core while a burst of worker messages is applied starts
    after the message being applied (before, it waited for the whole turn)."""
    served = calls_during_burst(20, at=3, calls=1)
    assert served.index("user") == 4
    assert [s for s in served if s != "user"] == list(range(20))


def test_a_flood_of_calls_lets_worker_messages_through_between_its_shares():
    """At most LANE_PER_MESSAGE calls start between two worker messages: a flood of users' calls
    (here 100 at once) cannot hold a worker's heartbeats back until it ends."""
    from coordinator.edge.worker_stream import LANE_PER_MESSAGE

    served = calls_during_burst(5, at=0, calls=100)
    assert [s for s in served if s != "user"] == list(range(5))
    assert served.index(1) == 1 + LANE_PER_MESSAGE  # message 1 after the first share, not after all 100


def test_a_streams_end_is_applied_after_every_message_it_read():
    async def main() -> tuple[list, int]:
        core = Core(2)
        loop = asyncio.get_running_loop()
        inbox = Inbox(core, identities=None, core=loop, edge=loop)
        for i in range(5):
            inbox.put("conn", heartbeat(i))
        inbox.put("conn", GONE, "stream closed by the worker")
        while len(core.served) < 6:
            await asyncio.sleep(0)
        return core.served, core.intake.deferred

    served, deferred = asyncio.run(main())
    assert served == [0, 1, 2, 3, 4, "stream closed by the worker"]  # over three turns of 2
    assert deferred > 0


def test_a_stopping_coordinator_applies_messages_but_not_stream_ends_and_a_closed_one_nothing():
    """The streams a stopping coordinator's servers cancel end by its leaving, not the workers':
    applied, their ends failed the running jobs the next coordinator would re-attach. Their
    messages still count while the servers drain (a rank's StoreReady forms its group)."""
    async def main() -> list:
        core = Core(0)
        loop = asyncio.get_running_loop()
        inbox = Inbox(core, identities=None, core=loop, edge=loop, batch_s=0)

        async def put(*item) -> None:
            inbox.put("conn", *item)
            for _ in range(20):
                await asyncio.sleep(0)
        await put(heartbeat(1))
        core.stopping = True
        await put(heartbeat(2))
        await put(GONE, "stream cancelled")
        core.closed = True
        await put(heartbeat(3))
        return core.served

    assert asyncio.run(main()) == [1, 2]


def test_heartbeats_wake_the_core_once_a_batch_and_any_other_message_at_once():
    """Heartbeats wait up to batch_s for one wake-up of the core; a job's end does not wait, and
    the heartbeats before it are applied with it, in order."""
    async def main() -> tuple[list, list]:
        loop, core = asyncio.get_running_loop(), Core(0)
        inbox = Inbox(core, identities=None, core=loop, edge=loop, batch_s=0.05)
        drains, drain = [], inbox._drain
        inbox._drain = lambda: (drains.append(len(core.served)), drain())
        t0 = loop.time()
        for i in range(50):
            inbox.put("conn", heartbeat(i))
        while len(core.served) < 50:
            await asyncio.sleep(0.001)
        waited = loop.time() - t0
        for i in range(50, 53):
            inbox.put("conn", heartbeat(i))
        inbox.put("conn", wpb.WorkerMessage(done=wpb.JobDone(job_id="j")))
        t1 = loop.time()
        while len(core.served) < 54:
            await asyncio.sleep(0)
        return drains, [waited, loop.time() - t1], core.served

    drains, (waited, then), served = asyncio.run(main())
    assert len(drains) == 2  # fifty heartbeats, one wake-up; the job's end, another
    assert 0.04 <= waited and then < 0.04, (waited, then)
    assert served[:53] == list(range(53)) and len(served) == 54


def test_the_workers_batches_of_one_turn_reach_the_edge_in_one_hop():
    class Edge:  # records the hops; delivers at once
        def __init__(self) -> None:
            self.hops = 0

        def is_closed(self) -> bool:
            return False

        def call_soon_threadsafe(self, fn, *args) -> None:
            self.hops += 1
            fn(*args)

    async def main() -> tuple[int, list, list]:
        edge, queues = Edge(), [asyncio.Queue(), asyncio.Queue()]
        outgoing = Outgoing(asyncio.get_running_loop(), edge)
        for k in range(3):  # three workers' batches in one turn (two to the same stream)
            outgoing.put(queues[k % 2], [f"m{k}", f"n{k}"])
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return edge.hops, [queues[0].get_nowait() for _ in range(4)], [queues[1].get_nowait() for _ in range(2)]

    hops, first, second = asyncio.run(main())
    assert hops == 1
    assert first == ["m0", "n0", "m2", "n2"] and second == ["m1", "n1"]  # each stream's in order


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


def test_a_pass_stopped_short_is_followed_by_the_next_without_another_input():
    from coordinator.core.load import PassPacer

    async def main() -> int:
        left = {"ranks": 10}

        def pass_() -> None:  # each pass starts 4 ranks of what is left (Timings.pass_ranks)
            left["ranks"] = max(0, left["ranks"] - 4)
        pacer = PassPacer(pass_, more=lambda: left["ranks"] > 0)
        pacer.soon()  # one input
        for _ in range(200):
            if not left["ranks"]:
                break
            await asyncio.sleep(0.001)
        return left["ranks"]

    assert asyncio.run(main()) == 0  # three passes: 10 -> 6 -> 2 -> 0


def test_without_a_loop_a_pass_runs_at_once():
    from coordinator.core.load import PassPacer
    runs = []
    PassPacer(lambda: runs.append(1)).soon()
    assert runs == [1]


def test_slow_worker_messages_stop_a_turn_at_its_time_budget():
    # The count bound far above the burst: only the time budget can cut the turn.
    assert run_burst(256, budget_s=0.0, cost_s=0.002).index("user") == 20  # no time bound: behind the whole burst
    served = run_burst(256, budget_s=0.005, cost_s=0.002)
    assert 1 <= served.index("user") <= 3  # 2 ms each: the turn stopped after 5-6 ms of them
    assert [s for s in served if s != "user"] == list(range(20))  # every message, in arrival order


def test_worst_of_reads_the_last_seconds_worst():
    from coordinator.core.load import WorstOf

    w = WorstOf(window_s=1.0)
    w.record(0.2, now=10.0)
    w.record(0.05, now=10.5)
    assert w.worst(now=10.9) == 0.2 and w.worst(now=11.2) == 0.05 and w.worst(now=12.0) == 0.0


def test_worst_of_agrees_with_a_walk_of_every_figure():
    import random

    from coordinator.core.load import WorstOf

    rng, w, seen, now = random.Random(7), WorstOf(window_s=1.0), [], 0.0
    for _ in range(3000):
        now += rng.expovariate(20.0)
        figure = rng.choice([0.0, rng.random(), rng.random() * 0.01, -0.1])
        w.record(figure, now=now)
        seen.append((now, max(0.0, figure)))
        at = now + rng.choice([0.0, 0.3, 0.99, 1.5])
        assert w.worst(now=at) == max((x for t, x in seen if t >= at - 1.0), default=0.0)
    assert len(w._samples) < 100  # figures a later one outdid were dropped


def test_a_worker_message_behind_a_burst_records_its_wait():
    core = burst(per_turn=0, n=5, cost_s=0.01)
    assert core.intake.waits.worst() >= 0.04  # the fifth waited for four messages of 10 ms each


def test_the_core_hears_up_to_the_oldest_message_still_waiting_in_the_inbox():
    """IntakeGate.heard_until (what a tick counts silences up to) is when the oldest message not
    yet applied reached the inbox, and now once the inbox has drained."""
    async def main() -> tuple[float, float, float, float]:
        core = Core(1)  # one message a turn: the rest wait
        loop = asyncio.get_running_loop()
        inbox = Inbox(core, identities=None, core=loop, edge=loop, batch_s=0)
        first = time.monotonic()
        for i in range(3):
            inbox.put("conn", heartbeat(i))
        later = first + 10.0
        waiting = core.intake.heard_until(later)
        while len(core.served) < 3:
            await asyncio.sleep(0)
        return first, waiting, core.intake.heard_until(later), later

    first, waiting, drained, later = asyncio.run(main())
    assert first <= waiting < first + 1.0  # the first message's arrival, not `later`
    assert drained == later


def test_users_calls_at_the_checkpoints_do_not_spend_the_messages_budget(monkeypatch):
    """In one drain, users' calls started at its checkpoints take about HOPS_PER_DRAIN_S at most,
    and the worker messages still get their own budget (IntakeGate.budget_s): counted together,
    8 slow calls between two messages left one message a turn. The clock is the test's: each
    call costs 1 ms of it and each message 0.2 ms."""
    from coordinator.core.load import DEFAULT_BUDGET_S
    from coordinator.edge.hop import lane
    from coordinator.edge.worker_stream import HOPS_PER_DRAIN_S, LANE_PER_MESSAGE

    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])

    def spend(seconds: float) -> None:
        clock[0] += seconds

    async def main() -> tuple[int, int]:
        core = Core(256)  # the gate's count and its time budget
        core.on_message = lambda conn, msg: (spend(0.0002), core.served.append(msg.heartbeat.op_seq))
        loop = asyncio.get_running_loop()
        inbox = Inbox(core, identities=None, core=loop, edge=loop, batch_s=0)
        calls = []
        for _ in range(40):  # a burst of slow calls, queued before the messages
            lane(loop).put(lambda: (spend(0.001), calls.append(len(core.served))), "bulk")
        first = []
        drain = inbox._drain

        def drain_once() -> None:  # the first drain: the messages and the calls it ran
            served0, calls0 = len(core.served), len(calls)
            drain()
            if not first:
                first.append((len(core.served) - served0, len(calls) - calls0))
        inbox._drain = drain_once
        for i in range(100):
            inbox.put("conn", heartbeat(i))
        while len(core.served) < 100 or len(calls) < 40:
            await asyncio.sleep(0)
        return first[0]

    messages, calls = asyncio.run(main())
    assert calls <= HOPS_PER_DRAIN_S / 0.001 + LANE_PER_MESSAGE  # the calls' share of the drain
    assert messages >= DEFAULT_BUDGET_S / 0.0002  # and the messages' budget was all theirs


def test_relayed_messages_wait_as_bytes_that_the_collector_does_not_track():
    """A relayed message waits as its bytes (coordinator/edge/worker_stream.py's Backlog): nothing
    that waits is an object the cyclic collector walks, and it is applied as the message it was,
    in order with messages that wait parsed."""
    import gc

    async def main() -> tuple[list, list]:
        core = Core(0)
        loop = asyncio.get_running_loop()
        inbox = Inbox(core, identities=None, core=loop, edge=loop, batch_s=0.5)  # heartbeats wait
        for i in range(5):
            msg = heartbeat(i)
            if i == 2:
                inbox.put("conn", msg)  # a stream of this process's own: parsed by grpc
            else:
                inbox.put("conn", msg, raw=msg.SerializeToString())
        backlog = inbox._items
        waiting = [m for m in backlog.msgs]
        tracked = [type(m).__name__ for m in (*waiting, *backlog.whys, *backlog.since) if gc.is_tracked(m)]
        while len(core.served) < 5:
            await asyncio.sleep(0.01)
        return tracked, core.served

    tracked, served = asyncio.run(main())
    assert tracked == ["WorkerMessage"]  # only the one that came parsed
    assert served == [0, 1, 2, 3, 4]
