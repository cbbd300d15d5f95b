"""The worker relay started by the coordinator itself once the fleet is large (`--relay-at`).

Why: without a relay, every worker's stream and every user's call share the gRPC server of one
process, and grpc.aio accepts that server's calls one at a time behind the streams' traffic. On
the 2 x H200 host (coordinator on 2 cores, 5,000 simulated workers draining a queue beside a
check sweep) neither loop stalled, yet users' calls waited up to 3.5 s while the sweep's 157
gangs ended: calls queued before they were accepted. The same run through the relay: p99 33 ms.
So past `--relay-at` directly served streams (512 by default), a new stream is answered with the
relay's port (Registered.move_to_port) instead of a registration, and the daemon dials the relay
on the host it already dials; the streams already served stay where they are. Small fleets (the
demo, the tests, a few hosts) never start it. `--worker-address` still names a relay's address
outright (no automatic one then); `--relay-at 0` never starts one.

Past `--relay-share` streams on every relay (10,000 by default), another relay starts beside them,
up to MOST; each new stream goes to the least loaded (its streams and the moves sent to it in the
last MOVES_S, which have not registered yet). Each relay is a process with its own share of the
fleet, as a rack's relay host would be, and sends its workers' unchanged heartbeats on as one
ALIVE frame a quarter second (coordinator/edge/relay.py): the core's cost per worker stays small.
`--relay-cpus` puts the relays on CPUs of their own.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Sequence

from coordinator.edge.relay_host import RelayHost
from ringleader.security import with_port

log = logging.getLogger("ringleader.coordinator")
START_WAIT_S = 10.0  # a stream waits this long for a relay's start, then is served elsewhere
MOST = 16  # automatic relays at most
MOVES_S = 10.0  # a move counts toward its relay's load this long (until the daemon has registered there)


class AutoRelay:
    """On the edge loop: whether a new direct stream should move to a relay, and which."""

    def __init__(self, workers, grpc_address: str, settings: str, at: int, share: int = 0,
                 cpus: Sequence[int] = ()) -> None:
        self._workers, self._settings, self.at, self.share, self.cpus = workers, settings, at, share, tuple(cpus)
        self._address = with_port(grpc_address, 0)  # the gRPC host, a port of its own
        self.relays: list[RelayHost] = []
        self._moves: dict[int, collections.deque] = {}  # id(relay) -> when streams were sent there
        self._starting: asyncio.Task | None = None
        self.failed = ""  # why the first relay could not start (the streams then stay direct)

    def _live(self) -> list[RelayHost]:
        return [r for r in self.relays if r.proto is not None]  # (one whose link ended is started again)

    def _load(self, relay: RelayHost, now: float) -> int:
        moves = self._moves.setdefault(id(relay), collections.deque())
        while moves and moves[0] < now - MOVES_S:
            moves.popleft()
        return relay.streams + len(moves)

    async def move_to(self, direct: int) -> int:
        """A relay's port for a new stream when `direct` streams are served here already (the
        first relay started when the fleet first grows so far, another when every relay carries
        `share`; the streams arriving meanwhile wait for it, at most START_WAIT_S); 0: serve the
        stream here."""
        if not self.at or direct < self.at or self.failed:
            return 0
        now = time.monotonic()
        live = self._live()
        full = not live or (self.share and min(self._load(r, now) for r in live) >= self.share)
        if full and len(self.relays) < MOST and (self._starting is None or self._starting.done()):
            self._starting = asyncio.get_running_loop().create_task(self._start())
        if not live and self._starting is not None and not self._starting.done():
            await asyncio.wait({self._starting}, timeout=START_WAIT_S)
            live = self._live()
        if not live:
            return 0  # a relay that died is started again (RelayHost does): served here meanwhile
        relay = min(live, key=lambda r: self._load(r, now))
        self._moves[id(relay)].append(now)
        return relay.port

    async def _start(self) -> None:
        relay = RelayHost(self._workers, self._address, self._settings, self.cpus)
        try:
            await relay.start()
        except Exception as exc:  # a relay is an optimisation: the fleet stays served as it is
            if not self.relays:
                self.failed = str(exc) or type(exc).__name__
            log.error("could not start a worker relay (streams stay where they are): %s", exc)
            await relay.stop()
            return
        self.relays.append(relay)
        log.info("%d workers served directly, %d relays: new workers' streams move to relays, one on port %d",
                 self.at, len(self.relays), relay.port)

    async def stop(self) -> None:
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
        for relay in self.relays:
            await relay.stop()
