import sys
sys.path.insert(0, "/work/main/.dev/yield")
import yieldprobe  # noqa
import os, sys, time
if os.environ.get("GC2_OUT") and "coordinator" in sys.argv[1:3]:
    import gc, atexit
    _rec, _st = [], [0.0, 0]
    def _cb(phase, info):
        if phase == "start":
            _st[0] = time.perf_counter(); _st[1] = time.thread_time()
        else:
            _rec.append((time.time(), (time.perf_counter() - _st[0]) * 1e3, (time.thread_time() - _st[1]) * 1e3, info["generation"], info["collected"]))
    gc.callbacks.append(_cb)
    def _dump():
        with open(os.environ["GC2_OUT"], "w") as f:
            for r in _rec: f.write("%.3f wall %.2f cpu %.2f gen %d collected %d\n" % r)
    atexit.register(_dump)
if os.environ.get("GCFAN_OUT") and "coordinator" in sys.argv[1:3]:
    import gc, atexit, collections as _c
    _fan = {"n": 0, "t0": time.time(), "cnt": _c.Counter(), "refs": _c.Counter(), "mx": _c.Counter(), "objs": 0, "big": []}
    def _fcb(phase, info):
        if phase != "start" or info.get("generation") != 0 or _fan["n"] >= 25 or time.time() - _fan["t0"] < 25:
            return
        _fan["n"] += 1
        objs = gc.get_objects(0)
        _fan["objs"] += len(objs)
        for o in objs:
            k = type(o).__module__ + "." + type(o).__qualname__
            r = len(gc.get_referents(o))
            _fan["cnt"][k] += 1; _fan["refs"][k] += r
            if r > _fan["mx"][k]: _fan["mx"][k] = r
            if r > 2000 and len(_fan["big"]) < 60:
                _fan["big"].append((r, k, repr(o)[:160]))
        del objs
    gc.callbacks.append(_fcb)
    def _fd():
        with open(os.environ["GCFAN_OUT"], "w") as f:
            f.write(f"passes {_fan['n']} young objects {_fan['objs']} total refs {sum(_fan['refs'].values())}\n")
            for k, v in _fan["refs"].most_common(40):
                f.write(f"{v:10d} refs {_fan['cnt'][k]:8d} objs max {_fan['mx'][k]:7d} {k}\n")
            for b in sorted(_fan["big"], reverse=True)[:40]: f.write(f"BIG {b}\n")
    atexit.register(_fd)
if os.environ.get("GROW_OUT") and "coordinator" in sys.argv[1:3]:
    import gc, atexit, threading, collections as _c
    _snaps = []
    def _snap(tag):
        c = _c.Counter(type(o).__module__ + "." + type(o).__qualname__ for o in gc.get_objects())
        _snaps.append((tag, time.time(), c, gc.get_count(), gc.get_freeze_count()))
    def _grow():
        for t in (20, 40, 55):
            time.sleep(t - (time.time() - _t0))
            _snap(f"t{t}")
    _t0 = time.time()
    threading.Thread(target=_grow, daemon=True).start()
    def _gd():
        _snap("exit")
        with open(os.environ["GROW_OUT"], "w") as f:
            for i in range(1, len(_snaps)):
                a, b = _snaps[i - 1], _snaps[i]
                f.write(f"== {a[0]} -> {b[0]} ({b[1]-a[1]:.1f} s) total {sum(a[2].values())} -> {sum(b[2].values())} counts {b[3]} frozen {b[4]}\n")
                d = b[2].copy(); d.subtract(a[2])
                for k, v in sorted(d.items(), key=lambda kv: -abs(kv[1]))[:25]:
                    f.write(f"{v:+9d} {b[2][k]:9d} {k}\n")
    atexit.register(_gd)
if os.environ.get("FN_OUT") and "coordinator" in sys.argv[1:3]:
    import threading, atexit, collections as _c, importlib
    _fn = _c.defaultdict(list)
    TARGETS = [("coordinator.edge.metrics", "CoordinatorStateCollector", "collect"),
               ("coordinator.edge.fleet_metrics", "FleetHealthCollector", "collect"),
               ("coordinator.edge.baseline_metrics", "BaselineRegressionsCollector", "collect"),
               ("coordinator.edge.trend_metrics", "TrendCollector", "collect"),
               ("coordinator.edge.load_metrics", "LoadCollector", "collect"),
               ("coordinator.core.control", "Control", "_tick"),
               ("coordinator.core.control", "Control", "schedule"),
               ("coordinator.core.facade", "Coordinator", "tick"),
               ("coordinator.core.facade", "Coordinator", "_commit"), ("coordinator.core.facade", "Coordinator", "cancel"), ("coordinator.health.fleet", "FleetHealth", "all_workers"), ("coordinator.core.facade", "Coordinator", "submit"), ("coordinator.core.facade", "Coordinator", "list_workers")]
    def _wrap(cls, name, key):
        orig = getattr(cls, name)
        import inspect
        if inspect.isgeneratorfunction(orig):
            def w(self, *a, **k):
                t = time.perf_counter(); out = list(orig(self, *a, **k)); _fn[key].append(time.perf_counter() - t); return iter(out)
        else:
            def w(self, *a, **k):
                t = time.perf_counter()
                try: return orig(self, *a, **k)
                finally: _fn[key].append(time.perf_counter() - t)
        setattr(cls, name, w)
    def _patch():
        done = set()
        while len(done) < len(TARGETS):
            for mod, cls, fn in TARGETS:
                if (mod, cls, fn) in done: continue
                m = sys.modules.get(mod)
                if m is not None and hasattr(m, cls):
                    _wrap(getattr(m, cls), fn, f"{cls}.{fn}"); done.add((mod, cls, fn))
            time.sleep(0.01)
    threading.Thread(target=_patch, daemon=True).start()
    try:
        import prometheus_client.exposition as _pe
        _og = _pe.generate_latest
        def _gl(*a, **k):
            t = time.perf_counter()
            try: return _og(*a, **k)
            finally: _fn["generate_latest"].append(time.perf_counter() - t)
        _pe.generate_latest = _gl
    except Exception: pass
    def _fd():
        with open(os.environ["FN_OUT"], "w") as f:
            for k, v in sorted(_fn.items()):
                v = sorted(v)
                f.write(f"{k:45s} n {len(v):6d} sum {sum(v):7.2f}s p50 {v[len(v)//2]*1e3:7.2f} p99 {v[int(len(v)*.99)]*1e3:7.2f} max {v[-1]*1e3:7.2f} ms\n")
    atexit.register(_fd)
if os.environ.get("PROF_OUT") and "coordinator" in sys.argv[1:3]:
    import threading, atexit, cProfile, pstats, io
    _profs = {}
    PT = [("coordinator.core.facade", "Coordinator", "cancel"), ("coordinator.edge.metrics", "CoordinatorMetrics", "render_off_loop"),
          ("coordinator.core.control", "Control", "schedule")]
    def _pw(cls, name, key):
        orig = getattr(cls, name)
        pr = _profs[key] = cProfile.Profile()
        def w(self, *a, **k):
            pr.enable()
            try: return orig(self, *a, **k)
            finally: pr.disable()
        setattr(cls, name, w)
    def _pp():
        done = set()
        while len(done) < len(PT):
            for mod, cls, fn in PT:
                if (mod, cls, fn) in done: continue
                m = sys.modules.get(mod)
                if m is not None and hasattr(m, cls):
                    _pw(getattr(m, cls), fn, f"{cls}.{fn}"); done.add((mod, cls, fn))
            time.sleep(0.01)
    threading.Thread(target=_pp, daemon=True).start()
    def _pd():
        with open(os.environ["PROF_OUT"], "w") as f:
            for k, pr in _profs.items():
                s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
                f.write(f"===== {k}\n{s.getvalue()}\n")
    atexit.register(_pd)
