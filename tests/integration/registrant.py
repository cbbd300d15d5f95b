"""The worker daemon's registration part alone, as its own process: worker/link.py's CoordinatorLink
with worker/credential.py's WorkerSecret, exactly as the daemon runs them, without an executor (so
dozens start in seconds on a loaded 2-core machine). The crash test kills it with the daemon's own
test-only fault (RINGLEADER_FAULTS=kill_registration=N, worker/faults.py) at each step.

    python tests/integration/registrant.py COORDINATOR WORKER_ID STATE_DIR WORKERS_TOKEN
"""

from __future__ import annotations

import asyncio
import logging
import sys

from ringleader.security import ClientSecurity
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from worker.credential import WorkerSecret
from worker.link import CoordinatorLink


async def main(address: str, worker_id: str, state_dir: str, token: str) -> None:
    def register() -> wpb.Register:
        return wpb.Register(worker_id=worker_id, host="registrant", address="127.0.0.1", backend="gloo",
                            version="registrant", device=pb.Device(type="cpu", index=0, name="registrant"))

    async def ignore(msg: wpb.CoordinatorMessage) -> None:
        pass

    link = CoordinatorLink(address, worker_id, register, wpb.Heartbeat, ignore, max_backoff_s=0.5,
                           security=ClientSecurity(token), secret=WorkerSecret(worker_id, state_dir))
    await link.run(asyncio.Event())


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(main(*sys.argv[1:5]))
