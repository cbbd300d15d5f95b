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
"""

from __future__ import annotations

import asyncio
import logging

from coordinator.edge.relay_host import RelayHost
from ringleader.security import with_port

log = logging.getLogger("ringleader.coordinator")
START_WAIT_S = 10.0  # a stream waits this long for the relay's start, then is served here


class AutoRelay:
    """On the edge loop: whether a new direct stream should move to the relay, and the relay."""

    def __init__(self, workers, grpc_address: str, settings: str, at: int) -> None:
        self._workers, self._settings, self.at = workers, settings, at
        self._address = with_port(grpc_address, 0)  # the gRPC host, a port of its own
        self.relay: RelayHost | None = None
        self._starting: asyncio.Task | None = None
        self.failed = ""  # why the relay could not start (the streams then stay direct)

    @property
    def port(self) -> int:
        return self.relay.port if self.relay is not None and self.relay.proto is not None else 0

    async def move_to(self, direct: int) -> int:
        """The relay's port for a new stream when `direct` streams are served here already (the
        relay started once, when the fleet first grows so far; the streams arriving meanwhile wait
        for it, at most START_WAIT_S); 0: serve the stream here."""
        if not self.at or direct < self.at or self.failed:
            return 0
        if self._starting is None:
            self._starting = asyncio.get_running_loop().create_task(self._start())
        if not self._starting.done():
            await asyncio.wait({self._starting}, timeout=START_WAIT_S)
        return self.port  # 0 while a relay that died is started again (RelayHost does): served here

    async def _start(self) -> None:
        relay = RelayHost(self._workers, self._address, self._settings)
        try:
            await relay.start()
        except Exception as exc:  # the relay is an optimisation: the fleet stays served directly
            self.failed = str(exc) or type(exc).__name__
            log.error("could not start the worker relay (streams stay on the gRPC port): %s", self.failed)
            await relay.stop()
            return
        self.relay = relay
        log.info("%d workers served directly: new workers' streams move to the worker relay on port %d",
                 self.at, relay.port)

    async def stop(self) -> None:
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
        if self.relay is not None:
            await self.relay.stop()
