# Local diagnosis probe (r18): every GC pass of the coordinator and of its relay: wall, CPU,
# generation, collected, and the young list's length at the start (what the pass walks).
import os, sys, time
_who = "coordinator" if "coordinator" in sys.argv[1:3] else "relay" if "--link" in sys.argv else ""
if os.environ.get("GCP_OUT") and _who:
    import gc, atexit
    rec, st = [], [0.0, 0.0, 0, 0]
    t0 = time.time()
    def cb(phase, info):
        if phase == "start":
            g = info["generation"]
            n = len(gc.get_objects(0)) if g == 0 else (len(gc.get_objects(0)) + len(gc.get_objects(1)))
            st[:] = [time.perf_counter(), time.thread_time(), n, gc.get_count()]
            return
        wall, cpu = (time.perf_counter() - st[0]) * 1e3, (time.thread_time() - st[1]) * 1e3
        rec.append("%.2f wall %.1f cpu %.1f gen %d collected %d walked %d count %s" % (time.time() - t0, wall, cpu, info["generation"], info["collected"], st[2], st[3]))
    gc.callbacks.append(cb)
    def dump():
        with open(os.environ["GCP_OUT"] + "." + _who, "w") as f:
            f.write("\n".join(rec) + "\n")
    atexit.register(dump)
