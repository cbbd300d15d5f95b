"""The edge loop: the coordinator's gRPC servers run on an event loop of their own thread, and every
handler's body runs on the core loop (the main thread's, where the coordinator's state lives), so
the core stays single-threaded.

Why: grpc.aio accepts a server's RPCs one at a time, and each accept takes a few turns of the loop
that serves it. Measured on this project's 2-core machine (grpcio 1.85): 50 concurrent calls to a
server whose loop turns take 30 ms finished after 9.1 s (about 6 turns a call), 10 ms turns 3.8 s.
While a fleet drains a deep queue the core loop's turns take 10-55 ms, which held user calls for
seconds while their handlers took under a millisecond. With the server on a loop of its own and the
bodies hopped to that same busy loop: 0.23 s and 0.07 s. The edge loop does nothing but gRPC's
plumbing; the hop costs a wake-up of each loop (call_soon_threadsafe).

What crosses: a handler's coroutine runs on the core loop with an `EdgeContext`, whose aborts run
on the edge loop (grpc.aio objects belong to the loop that made them); what it only reads or sets
(peer, auth_context, trailing metadata) it reads directly. The streams stay on the edge: the
workers', which read and write (coordinator/edge/worker_stream.py), and WatchJob, to which the
core pushes events (coordinator/edge/watch.py). A cancelled RPC cancels its core task
(run_coroutine_threadsafe chains cancellation).
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import sys
import threading
import time
import weakref
from typing import Awaitable, Callable, Coroutine

import grpc

from coordinator.core.load import LagMeter
from coordinator.shell.stallwatch import StallWatch


def on(loop: asyncio.AbstractEventLoop, coro: Coroutine, key: str = "") -> asyncio.Future:
    """Await `coro` run on `loop` (another thread's) from the calling loop, in `key`'s turn of its
    lane (the caller's client); cancelling the wait cancels the task there. One
    call_soon_threadsafe each way and nothing else: asyncio's
    run_coroutine_threadsafe + wrap_future put a concurrent.futures.Future (a lock and a condition)
    and two chained callbacks between the loops. A round trip between two loops, 20,000 in a row on
    the 2-core development machine: 94-106 us of CPU against 120-146 with those. Most of what is
    left is the two wake-ups themselves.

    Turns matter as much as CPU: while a fleet drains a deep queue the core's turns take 2-17 ms
    (1,000 simulated workers on 2 cores), and a call waits for every turn its body spans. So the
    body starts in the turn that receives it (an eager task, where Python has them: 3.12 and
    later) and its outcome leaves in the turn it ends (`_relay`), not one turn later in a done
    callback: a GetJob spans one turn of the core, not three."""
    here = asyncio.get_running_loop()
    answer = here.create_future()
    task: list[asyncio.Task] = []

    def start() -> None:  # on `loop`
        if answer.cancelled():  # the wait ended before the body started (a benign cross-thread read)
            coro.close()
            return
        task.append(_task(loop, _relay(coro, here, answer)))

    def cancelled(f: asyncio.Future) -> None:  # on the calling loop
        if f.cancelled():
            _soon(loop, lambda: task and task[0].cancel())

    answer.add_done_callback(cancelled)
    lane(loop).put(start, key)
    return answer


LANE_TURN_S = 0.005  # the lane's own turn stops starting bodies after this long: the rest next turn


class Lane:
    """Bodies hopped onto a loop, started ahead of the bulk work queued there: at the loop's next
    turn, as any callback, or sooner, at a checkpoint that bulk work offers (the worker inbox
    between two messages: coordinator/edge/worker_stream.py). A hop used to wait behind every
    callback queued before it, the rest of a busy core's turn and most of the next: inbox drains,
    placement passes and commits. At a checkpoint it waits for one message; with eager tasks
    (3.12+) the body's first step, most bodies whole, runs right there.

    Clients take turns: each `key` (a call's peer, so one client connection) has its own queue
    and the lane starts one body of each in turn. One client's bulk work cannot hold another's
    calls behind it: a user's SubmitJob waited behind 32 cancels of a script's burst. With the
    own turn's budget, churn's first 10 s (bench/control_plane.py) went from p99 122 ms to 59-83
    (docs/decisions/edge-loop.md)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()  # puts come from any thread
        self._arrived: collections.deque[tuple[str, Callable[[], None]]] = collections.deque()
        self._asked = False  # a turn of the lane's own is due on the loop
        self._turns: dict[str, collections.deque[Callable[[], None]]] = {}  # the loop's: the round, in order

    def put(self, start: Callable[[], None], key: str = "") -> None:
        """From any thread: `start()` on the loop, at its next turn or checkpoint, in `key`'s turn."""
        with self._lock:
            self._arrived.append((key, start))
        self._ask(self._loop.call_soon_threadsafe)

    def _ask(self, soon: Callable[[Callable[[], None]], object]) -> None:
        """An own turn of the lane, unless one is due already (it starts what has come by then)."""
        with self._lock:
            if self._asked:
                return
            self._asked = True
        soon(self._own_turn)

    @property
    def pending(self) -> bool:
        return bool(self._arrived or self._turns)

    def _own_turn(self) -> None:
        with self._lock:
            self._asked = False
        self.run(budget_s=LANE_TURN_S)

    def run(self, limit: int = 0, budget_s: float = 0.0) -> None:
        """On the loop: start what waits, a client at a time, at most `limit` bodies (0: no
        bound) and no more once `budget_s` has passed (0: no bound); what is left has a turn of
        the lane's own after the callbacks already due (the worker inbox among them). Bulk work
        passes a limit, so a flood of calls cannot hold its items back for good (a worker's
        heartbeats); the own turn's budget does the same for everything else on the loop."""
        n, turns, began = 0, self._turns, time.perf_counter()
        while not limit or n < limit:
            if self._arrived:
                with self._lock:  # what came since, each to its client's queue
                    while self._arrived:
                        key, start = self._arrived.popleft()
                        turns.setdefault(key, collections.deque()).append(start)
            if not turns:
                return
            key = next(iter(turns))
            queue = turns.pop(key)
            queue.popleft()()
            if queue:
                turns[key] = queue  # the back of the round
            n += 1
            if budget_s and time.perf_counter() - began > budget_s:
                break
        if self.pending:
            self._ask(self._loop.call_soon)


_LANES: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Lane]" = weakref.WeakKeyDictionary()
_LANES_LOCK = threading.Lock()


def lane(loop: asyncio.AbstractEventLoop) -> Lane:
    """The loop's one lane (made on first use)."""
    with _LANES_LOCK:
        found = _LANES.get(loop)
        if found is None:
            found = _LANES[loop] = Lane(loop)
        return found


EAGER = sys.version_info >= (3, 12)  # asyncio.Task(..., eager_start=True)


def _task(loop: asyncio.AbstractEventLoop, coro: Coroutine) -> asyncio.Task:
    """A task on `loop` (the running one), its first step run now where Python can (3.12+)."""
    if EAGER:
        return asyncio.Task(coro, loop=loop, eager_start=True)
    return loop.create_task(coro)


async def _relay(coro: Coroutine, here: asyncio.AbstractEventLoop, answer: asyncio.Future) -> None:
    """Run `coro` and hand its outcome to `answer` (on `here`) as it ends."""
    try:
        result = await coro
    except asyncio.CancelledError:
        _soon(here, _settle, answer, None, None, True)
        raise
    except Exception as exc:  # a body that failed after its caller left fails nobody: dropped
        _soon(here, _settle, answer, None, exc, False)
    except BaseException as exc:  # SystemExit, KeyboardInterrupt: the caller's error, and the loop's
        _soon(here, _settle, answer, None, exc, False)
        raise
    else:
        _soon(here, _settle, answer, result, None, False)


def retrieved(task: asyncio.Task) -> None:
    """Consume an ended stream task's outcome (a write that failed once the call ended), so that
    asyncio does not log it as never retrieved: a done callback of the workers' stream handlers."""
    if not task.cancelled():
        task.exception()


def _soon(loop: asyncio.AbstractEventLoop, fn: Callable, *args) -> None:
    if not loop.is_closed():  # a loop closed at shutdown waits for nothing more
        loop.call_soon_threadsafe(fn, *args)


def _settle(answer: asyncio.Future, result: object, exc: BaseException | None, cancelled: bool) -> None:
    """On the waiting loop: the other loop's outcome, unless the wait has ended already."""
    if answer.done():
        return
    if cancelled:
        answer.cancel()
    elif exc is not None:
        answer.set_exception(exc)
    else:
        answer.set_result(result)


class EdgeLoop:
    """A thread running one event loop for the process's gRPC servers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="grpc-edge", daemon=True)
        self._thread.start()
        self.stalls: StallWatch | None = None

    def watch_stalls(self, threshold_s: float) -> None:
        """Log this loop's stalls as the core's are (coordinator/shell/stallwatch.py; 0: not). Without
        the worker relay every worker's stream is read and written here, and a stall here holds
        every user call while the core loop, and its own watch, run on."""
        if threshold_s <= 0:
            return
        lag = LagMeter(shed_lag_s=0)
        self.stalls = StallWatch(lag, threshold_s, loop_name="gRPC edge")

        def start() -> None:  # on this loop (its task is cancelled with the others at close)
            lag.start()
            self.stalls.start()
        self.loop.call_soon_threadsafe(start)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine) -> Awaitable:
        return on(self.loop, coro)

    def close(self) -> None:
        """Cancel what is left on the loop (the server is stopped first), stop it and close it."""
        if self.stalls:
            self.stalls.stop()
        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(self._finish(), self.loop)
        self._thread.join(10)
        if not self._thread.is_alive() and not self.loop.is_closed():
            self.loop.close()

    async def _finish(self) -> None:
        rest = [t for t in asyncio.all_tasks(self.loop) if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)
        self.loop.stop()


class EdgeContext:
    """A grpc.aio.ServicerContext seen from the core loop (see the module's docstring)."""

    def __init__(self, context: grpc.aio.ServicerContext, edge: asyncio.AbstractEventLoop) -> None:
        self._context, self._edge = context, edge

    async def abort(self, code, details: str = "", trailing_metadata=()) -> None:
        # Raises the context's AbortError (the same object), which the edge handler re-raises.
        await on(self._edge, self._context.abort(code, details, trailing_metadata))

    def __getattr__(self, name: str):
        return getattr(self._context, name)  # peer, auth_context, set_trailing_metadata, ...


class HoppedServicer:
    """Stands in for `servicer` on the edge loop: each method named runs on `core`."""

    def __init__(self, servicer: object, names: list[str], core: asyncio.AbstractEventLoop,
                 edge: asyncio.AbstractEventLoop) -> None:
        for name in names:
            setattr(self, name, _hopped(getattr(servicer, name), core, edge))


def service_methods(descriptor) -> list[str]:
    return [m.name for m in descriptor.methods]


def _hopped(method: Callable, core: asyncio.AbstractEventLoop, edge: asyncio.AbstractEventLoop) -> Callable:
    if inspect.isasyncgenfunction(method):  # a stream waits on the core's events: see watch.py
        raise TypeError(f"{method.__name__}: a server stream is served on the edge (coordinator/edge/watch.py)")

    async def unary(request, context):
        async def body():
            answer = method(request, EdgeContext(context, edge))
            return (await answer) if inspect.isawaitable(answer) else answer
        return await on(core, body(), client(context))
    return unary


def client(context: grpc.aio.ServicerContext) -> str:
    """The call's connection (its peer address and port): the lane's turns are per client."""
    try:
        return context.peer() or ""
    except Exception:  # a context without a transport (a test's stand-in): one shared turn
        return ""
