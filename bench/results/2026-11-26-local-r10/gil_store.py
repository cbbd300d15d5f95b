import sys, time, threading, tempfile
sys.path.insert(0, ".")
from coordinator.store.sqlite import SqliteJobStore
from ringleader.v1 import jobs_pb2 as pb
d = tempfile.mkdtemp()
s = SqliteJobStore(d + "/j.db")
s.defer_commits(lambda: None)
for i in range(2000):
    s.create(pb.Job(id=f"{i:012x}", state=pb.QUEUED, spec=pb.JobSpec(world_size=2, name="x" * 50)))
s.commit()
def run(n):
    t = time.perf_counter()
    for i in range(n):
        j = f"{i:012x}"
        s.update(pb.Job(id=j, state=pb.RUNNING, started_at=1.0))
        s.add_event(pb.JobEvent(job_id=j, seq=i + 10))
    s.commit()
    return (time.perf_counter() - t) / n * 1e6
print(f"alone: {run(1000):.1f} us per update + event")
stop = False
def busy():
    x = 0
    while not stop: x += 1
th = threading.Thread(target=busy); th.start()
print(f"beside a busy thread: {run(200):.1f} us per update + event")
stop = True; th.join()
