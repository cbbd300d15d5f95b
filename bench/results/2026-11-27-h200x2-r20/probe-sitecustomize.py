# Device probe (r14): every garbage-collection pass of the coordinator, timed (wall and the
# thread's CPU), with its generation, what it collected and the thread it ran on.
import os, sys, time, threading
if os.environ.get("GC2_OUT") and "coordinator" in sys.argv[1:3]:
    import gc, atexit
    _rec, _st = [], [0.0, 0.0, (0, 0, 0)]
    def _cb(phase, info):
        if phase == "start":
            _st[0], _st[1], _st[2] = time.perf_counter(), time.thread_time(), gc.get_count()
        else:
            _rec.append((time.time(), (time.perf_counter() - _st[0]) * 1e3, (time.thread_time() - _st[1]) * 1e3,
                         info["generation"], info["collected"], _st[2], threading.current_thread().name))
    gc.callbacks.append(_cb)
    def _dump():
        with open(os.environ["GC2_OUT"], "w") as f:
            for r in _rec:
                f.write("%.3f wall %.2f cpu %.2f gen %d collected %d count %s %s\n" % r)
    atexit.register(_dump)
if (os.environ.get("CORE_CB_OUT") or os.environ.get("HOP_OUT") or os.environ.get("GARB2_OUT") or os.environ.get("GENS_OUT") or os.environ.get("CENSUS_OUT")) and "coordinator" in sys.argv[1:3]:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import yieldprobe  # noqa: F401  (its CORE_CB_OUT part: core callbacks over 2 ms, with a timeline)
if os.environ.get("GCY") and "coordinator" in sys.argv[1:3] and "yieldprobe" not in sys.modules:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import yieldprobe  # noqa: F401  (its GCY part: the young threshold, GCY1 the middle one)
