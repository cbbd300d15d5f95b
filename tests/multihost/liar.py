"""Fake (protocol level) worker daemon for the namespace bed: a process on a compromised host that
registers as a real daemon would (the workers' token, its own certificate under mTLS, the address
it connects from), beats as a healthy one, then answers its assignment with a JobDone for another
rank than its own: rank 1 says it is rank 0 and done. A real daemon never does that.

    python liar.py TARGET WORKER_ID ADDRESS TOKEN_FILE [CA CERT KEY]

It prints "registered", then "lied JOB RANK" when it has lied, and runs until killed.
"""

from __future__ import annotations

import asyncio
import sys

from ringleader.security import ClientSecurity, TlsFiles
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb
from ringleader.v1 import workers_pb2_grpc
from worker import fingerprint


async def main(target: str, worker_id: str, address: str, token_file: str, *tls: str) -> None:
    with open(token_file) as f:
        security = ClientSecurity(f.read().strip(), TlsFiles(*tls))
    async with security.aio_channel(target) as channel:
        call = workers_pb2_grpc.WorkerServiceStub(channel).Connect(metadata=security.metadata)
        await call.write(wpb.WorkerMessage(register=wpb.Register(
            worker_id=worker_id, host="liar", address=address, backend="gloo", version="fake",
            device=pb.Device(type="cpu", index=0, name="fake"),
            # The configuration a real daemon here registers with: a gang never mixes unlike ones.
            fingerprint=fingerprint.build("cpu", fingerprint.executor_software()))))
        await call.read()
        print("registered", flush=True)
        job, writing = [""], asyncio.Lock()  # one write at a time on a stream

        async def send(msg: wpb.WorkerMessage) -> None:
            async with writing:
                await call.write(msg)

        async def beat() -> None:
            while True:
                await send(wpb.WorkerMessage(heartbeat=wpb.Heartbeat(job_id=job[0], executor=pb.EXECUTOR_OK)))
                await asyncio.sleep(0.5)

        beater = asyncio.create_task(beat())  # noqa: F841 (held for the process's life)
        while True:
            msg = await call.read()
            if msg.WhichOneof("msg") == "assignment":
                a = msg.assignment
                job[0] = a.job_id
                lie = 0 if a.rank else 1
                await send(wpb.WorkerMessage(done=wpb.JobDone(job_id=a.job_id, rank=lie, ok=True)))
                print(f"lied {a.job_id} {a.rank}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
