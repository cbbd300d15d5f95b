# The churn's first seconds in process: N one-rank jobs running on N workers, each cancelled (and
# committed, as its CancelJob's durable() does) and its worker's aborted Done taken. The facade with
# its SQLite store, no servers and no loop (each input's placement pass runs at once); the time is
# the core's own work per cancel. usage: python cancel-burst.py TREE N
import sys, tempfile, time
from pathlib import Path

sys.path.insert(0, sys.argv[1])
from coordinator.core.facade import Coordinator  # noqa: E402
from coordinator.store.sqlite import SqliteJobStore  # noqa: E402
from ringleader.v1 import jobs_pb2 as pb, workers_pb2 as wpb  # noqa: E402

n = int(sys.argv[2])
store = SqliteJobStore(Path(tempfile.mkdtemp()) / "jobs.db")
store.defer_commits(lambda: None)
statements: list[str] = []
core = Coordinator(store)
conns = [core.register(wpb.Register(worker_id=f"w{i}", host=f"h{i // 8}", address=f"10.0.{i // 250}.{i % 250 + 1}",
                                    backend="gloo", version="test", device=pb.Device(type="cpu", index=i % 8, name="cpu")))
         for i in range(n)]
spec = pb.JobSpec(world_size=1, collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))
jobs = [core.submit(spec) for _ in range(n)]
store.commit()
holder = {c.job_id: c for c in conns}
assert len(holder) == n, "every job running"
store._conn.set_trace_callback(statements.append)
t0 = time.perf_counter()
for job in jobs:
    core.cancel(job.id)
    store.commit()  # its CancelJob's durable()
    aborted = wpb.JobDone(job_id=job.id, rank=0, ok=False, failure=wpb.ABORTED, error="aborted: cancelled")
    core.on_message(holder[job.id], wpb.WorkerMessage(done=aborted))
store.commit()
spent = time.perf_counter() - t0
store._conn.set_trace_callback(None)
kinds = {}
for s in statements:
    kinds[" ".join(s.split()[:3])] = kinds.get(" ".join(s.split()[:3]), 0) + 1
assert all(c.state == pb.IDLE for c in conns) and all(core.get(j.id).state == pb.CANCELLED for j in jobs)
print(f"{n} cancels: {spent / n * 1e6:.0f} us each, {len(statements) / n:.1f} statements each:",
      ", ".join(f"{k} {v / n:.1f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])))
