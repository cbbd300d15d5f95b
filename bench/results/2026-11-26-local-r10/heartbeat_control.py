import sys, time, timeit
sys.path.insert(0, "tests/unit"); sys.path.insert(0, ".")
from test_control import Fleet
from coordinator.core.inputs import WorkerMsg
from coordinator.store.memory import MemoryJobStore
from coordinator.core.facade import Coordinator
from ringleader.v1 import workers_pb2 as wpb, jobs_pb2 as pb
f = Fleet(100)
msg = wpb.WorkerMessage(heartbeat=wpb.Heartbeat(executor=pb.EXECUTOR_OK))
conn = f.conns["w5"]
n = 50000
t = timeit.timeit(lambda: f.ctl.handle(WorkerMsg(conn, msg), place=False), number=n)
print(f"Control.handle heartbeat: {t/n*1e6:.2f} us")
import cProfile, pstats
cProfile.run("for _ in range(20000): f.ctl.handle(WorkerMsg(conn, msg), place=False)", "/tmp/hb.prof")
pstats.Stats("/tmp/hb.prof").sort_stats("tottime").print_stats(12)
