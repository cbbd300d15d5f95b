"""gRPC calls shared by the control-plane benches (bench/control_plane.py and bench/churn.py).

Measures nothing and asserts nothing itself: the deadline every bench call carries, a concurrent
submitter, and a wait on a condition. It exists so that the two benches import it rather than
each other.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from ringleader.v1 import jobs_pb2 as pb

DEADLINE_S = 30.0


async def fill(stub, specs, concurrency: int = 32) -> list[str]:
    """Submit `specs`; the ids of the jobs."""
    todo, ids = list(specs), []

    async def worker() -> None:
        while todo:
            job = await stub.SubmitJob(pb.SubmitJobRequest(spec=todo.pop(), request_id=uuid.uuid4().hex),
                                       timeout=DEADLINE_S)
            ids.append(job.id)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ids


async def until(check, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.5)
