"""`ringleader demo`: the embedded default, end to end on this machine.

A coordinator in this process, one worker daemon process per local GPU (two gloo workers on
CPU where there is none), one all_reduce sweep through the real gRPC API, the nccl-tests-style
table, then a clean exit.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time

import grpc

from ringleader.app import table
from ringleader.app.process import CoordinatorConfig, RunningCoordinator
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import jobs_pb2_grpc

WORKERS_READY_TIMEOUT_S = 180


def visible_gpu_count() -> int:
    """CUDA devices visible here, asked in a child so the calling process never touches CUDA."""
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                         capture_output=True, text=True, check=False)
    return int(out.stdout.strip() or 0) if out.returncode == 0 else 0


def local_devices() -> list[str]:
    """One entry per visible GPU, or two CPU workers."""
    return [f"cuda:{i}" for i in range(visible_gpu_count())] or ["cpu", "cpu"]


async def run_demo(max_bytes: int | None = None, http_address: str = "127.0.0.1:0", serve: bool = False) -> int:
    """Run the demo; with `serve`, keep coordinator and workers up after the sweep (until
    Ctrl-C) so the dashboard and the API can be explored."""
    devices = local_devices()
    on_gpu = devices[0].startswith("cuda")
    max_bytes = max_bytes or ((1 << 30) if on_gpu else (64 << 20))
    with tempfile.TemporaryDirectory(prefix="ringleader-demo-") as tmp:
        config = CoordinatorConfig(grpc_address="127.0.0.1:0", http_address=http_address,
                                   db=os.path.join(tmp, "jobs.db"))
        async with RunningCoordinator(config) as coord:
            print(f"coordinator: gRPC {coord.grpc_target}" + (f", dashboard {coord.http_url}" if coord.http_url else ""))
            print(f"starting {len(devices)} workers: {', '.join(devices)}", flush=True)
            procs = [subprocess.Popen([sys.executable, "-m", "ringleader", "--coordinator", coord.grpc_target,
                                       "worker", "--device", d], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                     for d in devices]
            try:
                code = await _sweep(coord, len(devices), max_bytes)
                if serve:
                    print(f"serving on gRPC {coord.grpc_target}" + (f" and {coord.http_url}" if coord.http_url else "")
                          + "; Ctrl-C stops", flush=True)
                    await _until_interrupted()
                return code
            finally:
                for p in procs:
                    p.terminate()
                for p in procs:  # waited off the loop, so the coordinator sees them leave
                    try:
                        await asyncio.to_thread(p.wait, 15)
                    except subprocess.TimeoutExpired:
                        p.kill()


async def _until_interrupted() -> None:
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def _sweep(coord: RunningCoordinator, n: int, max_bytes: int) -> int:
    deadline = time.monotonic() + WORKERS_READY_TIMEOUT_S
    while sum(w.state == pb.IDLE for w in coord.core.list_workers().workers) < n:
        if time.monotonic() > deadline:
            print(f"workers did not register within {WORKERS_READY_TIMEOUT_S} s", file=sys.stderr)
            return 1
        await asyncio.sleep(0.1)
    async with grpc.aio.insecure_channel(coord.grpc_target) as channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        spec = pb.JobSpec(world_size=n, name="demo", collective=pb.CollectiveSpec(
            op="all_reduce", dtype="float32", min_bytes=8, max_bytes=max_bytes, factor=2))
        job = await stub.SubmitJob(pb.SubmitJobRequest(spec=spec))
        print(f"job {job.id}: all_reduce float32 sum, 8 B .. {max_bytes} B on {n} ranks", flush=True)
        async for ev in stub.WatchJob(pb.WatchJobRequest(job_id=job.id)):
            if ev.WhichOneof("event") == "result":
                print(f"  {ev.result.size_bytes:>12} B  {ev.result.busbw_gbps:8.2f} GB/s busbw", flush=True)
        job = await stub.GetJob(pb.GetJobRequest(job_id=job.id))
    print(f"job {job.id} {table.state_name(job.state)} on {job.backend}: {job.reason}")
    if job.results:
        print(table.results_table(job.results))
    if coord.http_url:
        print(f"dashboard: {coord.http_url}/jobs/{job.id}")
    return 0 if job.state == pb.SUCCEEDED else 1
