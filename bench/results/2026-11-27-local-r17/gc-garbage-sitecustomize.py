# Local diagnosis probe (r17): for every young or middle GC pass of the coordinator, the kinds of
# cyclic garbage it found (DEBUG_SAVEALL keeps what a pass finds; it is counted, then dropped).
import os, sys, time, threading
if os.environ.get("GCK_OUT") and "coordinator" in sys.argv[1:3]:
    import gc, atexit, collections
    gc.set_debug(gc.DEBUG_SAVEALL)
    rec, st, t0 = [], [0.0, 0], time.time()
    def cb(phase, info):
        if phase == "start":
            st[0], st[1] = time.perf_counter(), len(gc.garbage)
            return
        wall = (time.perf_counter() - st[0]) * 1e3
        kinds = ""
        if info["generation"] < 2:
            c = collections.Counter(type(o).__module__ + "." + type(o).__qualname__ for o in gc.garbage[st[1]:])
            kinds = " | " + ", ".join(f"{v} {k}" for k, v in c.most_common(8))
        gc.garbage.clear()
        rec.append("%.2f wall %.1f gen %d collected %d%s" % (time.time() - t0, wall, info["generation"], info["collected"], kinds))
    gc.callbacks.append(cb)
    atexit.register(lambda: open(os.environ["GCK_OUT"], "w").write("\n".join(rec) + "\n"))
