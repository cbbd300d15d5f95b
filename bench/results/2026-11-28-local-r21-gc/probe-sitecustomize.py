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
if os.environ.get("FULLGC_OUT") and "coordinator" in sys.argv[1:3]:
    # r21: every FULLGC_EVERY s, the oldest generation's size and a forced full pass, timed (what
    # a full pass would cost the coordinator at that moment).
    import gc
    def _full():
        every = float(os.environ.get("FULLGC_EVERY", "30"))
        with open(os.environ["FULLGC_OUT"], "w") as f:
            while True:
                time.sleep(every)
                objs = gc.get_objects(2); n2 = len(objs); frozen = gc.get_freeze_count()
                if os.environ.get("FULLGC_CENSUS"):
                    import collections as _c
                    cnt = _c.Counter()
                    for o in objs:
                        t = type(o); k = t.__module__ + "." + t.__qualname__
                        if t is dict: k += "{" + ",".join(sorted(str(x) for x in list(o)[:4])) + "}"
                        elif t is tuple: k += "(" + ",".join(type(x).__name__ for x in o[:3]) + ")"
                        cnt[k] += 1
                    f.write("census %s\n" % cnt.most_common(25))
                del objs
                young = gc.collect(1)  # r21: what the young and middle held first, so the full pass frees the oldest's garbage only
                t0, c0 = time.perf_counter(), time.thread_time()
                freed = gc.collect(2)
                f.write("%.2f old %d frozen %d middle pass freed %d, full pass wall %.1f ms cpu %.1f ms freed %d\n" % (
                    time.time(), n2, frozen, young, (time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3, freed))
                f.flush()
    threading.Thread(target=_full, daemon=True, name="fullgc-probe").start()
