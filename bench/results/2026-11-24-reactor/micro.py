"""In-process CPU cost of the facade's hot paths (ad hoc, for before/after comparison)."""
import asyncio, sys, time
from coordinator.core.facade import Coordinator, Timings
from coordinator.store.memory import MemoryJobStore
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import workers_pb2 as wpb

def main():
    core = Coordinator(MemoryJobStore(), Timings())
    conns = []
    t = time.process_time()
    for i in range(2000):
        conns.append(core.register(wpb.Register(worker_id=f"w{i}", host=f"h{i//8}", address="10.0.0.1", backend="gloo",
            device=pb.Device(type="cpu", index=i % 8, name="cpu"))))
    reg = (time.process_time() - t) / 2000 * 1e6
    hb = wpb.WorkerMessage(heartbeat=wpb.Heartbeat(executor=pb.EXECUTOR_OK))
    t = time.process_time()
    for r in range(10):
        for c in conns:
            core.on_message(c, hb)
    beat = (time.process_time() - t) / 20000 * 1e6
    spec = pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))
    t = time.process_time()
    for k in range(1000):
        job = core.submit(spec)
        got = core.get(job.id)
        members = {w.rank: w.worker_id for w in got.workers}
        byid = {c.worker_id: c for c in conns}
        c0, c1 = byid[members[0]], byid[members[1]]
        core.on_message(c0, wpb.WorkerMessage(store_ready=wpb.StoreReady(job_id=job.id, store_port=1)))
        core.on_message(c0, wpb.WorkerMessage(result=wpb.ResultReport(job_id=job.id, result=pb.SizeResult(
            op="all_reduce", dtype="float32", reduce_op="sum", size_bytes=1024, world_size=2))))
        for rank, c in ((0, c0), (1, c1)):
            core.on_message(c, wpb.WorkerMessage(done=wpb.JobDone(job_id=job.id, rank=rank, ok=True)))
        for c in (c0, c1):
            while not c.outbox.empty():
                c.outbox.get_nowait()
    cycle = (time.process_time() - t) / 1000 * 1e6
    t = time.process_time()
    for k in range(200):
        (core.tick if hasattr(core, "tick") else core.liveness.tick)(time.monotonic())
    tick = (time.process_time() - t) / 200 * 1e6
    print(f"register {reg:.1f} us | heartbeat {beat:.2f} us | job cycle {cycle:.0f} us | tick (2000 workers) {tick:.0f} us")

asyncio.run(asyncio.sleep(0)) ; main()
