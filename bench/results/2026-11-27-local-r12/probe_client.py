# A second, separate user: its own process and connection; health Check (edge only) and GetJob
# (hopped to the core) at 20/s each, open loop; writes "kind t_send latency_ms".
import asyncio, sys, time, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from ringleader.v1 import jobs_pb2, jobs_pb2_grpc
async def main(addr, out, dur):
    f = open(out, "w", buffering=1)
    async with grpc.aio.insecure_channel(addr) as ch:
        h = health_pb2_grpc.HealthStub(ch); j = jobs_pb2_grpc.JobServiceStub(ch)
        async def one(kind, call):
            t = time.monotonic()
            try: await call()
            except grpc.aio.AioRpcError: pass
            f.write(f"{kind} {t:.4f} {(time.monotonic()-t)*1e3:.2f}\n")
        tasks = set(); t0 = time.monotonic(); i = 0
        while time.monotonic() - t0 < dur:
            await asyncio.sleep(max(0, t0 + i / 20 - time.monotonic())); i += 1
            for kind, call in (("health", lambda: h.Check(health_pb2.HealthCheckRequest(), timeout=30)),
                               ("getjob", lambda: j.GetJob(jobs_pb2.GetJobRequest(job_id="j-none"), timeout=30))):
                tk = asyncio.create_task(one(kind, call)); tasks.add(tk); tk.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)
asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
