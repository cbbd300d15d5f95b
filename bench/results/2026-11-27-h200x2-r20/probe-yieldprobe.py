# Experiment: the core loop hands the GIL to the edge thread every YIELD_MS of its own running.
import os, sys, time, threading
if os.environ.get("YIELD_MS") and "coordinator" in sys.argv[1:3]:
    import asyncio.base_events as be
    every, nap = float(os.environ["YIELD_MS"]) / 1e3, float(os.environ.get("YIELD_NAP_US", "100")) / 1e6
    orig = be.BaseEventLoop._run_once
    main = threading.main_thread()
    last = [time.perf_counter()]
    def _run_once(self):
        if threading.current_thread() is main:
            now = time.perf_counter()
            if now - last[0] > every:
                time.sleep(nap)
                last[0] = time.perf_counter()
        orig(self)
    be.BaseEventLoop._run_once = _run_once
if os.environ.get("EDGE_ITER_OUT") and "coordinator" in sys.argv[1:3]:
    
    import edgeprobe
    from coordinator.edge import hop
    orig_run = hop.EdgeLoop._run
    def _run(self):
        edgeprobe.install(self.loop, os.environ["EDGE_ITER_OUT"])
        orig_run(self)
    hop.EdgeLoop._run = _run
if os.environ.get("CORE_CB_OUT") and "coordinator" in sys.argv[1:3]:
    import asyncio.events as ev, collections, atexit
    main = threading.main_thread()
    orun = ev.Handle._run
    hist = collections.Counter(); tot = collections.Counter(); longs = []; per = {}; tl = []
    def _run(self):
        if threading.current_thread() is not main:
            return orun(self)
        t = time.perf_counter()
        orun(self)
        d = time.perf_counter() - t
        if d > 0.002:
            cb = self._callback
            name = getattr(cb, "__qualname__", None) or repr(cb)[:80]
            if "step" in name or "wakeup" in name:
                coro = getattr(getattr(cb, "__self__", None), "_coro", None)
                fr = getattr(coro, "cr_frame", None)
                while fr is None and coro is not None and getattr(coro, "cr_await", None) is not None:
                    coro = coro.cr_await; fr = getattr(coro, "cr_frame", None)
                name = "task:" + getattr(coro, "__qualname__", "?")
            hist[name] += 1; tot[name] += d
            longs.append(d); per.setdefault(name, []).append(d); tl.append((time.time(), d, name))
    ev.Handle._run = _run
    def dump():
        with open(os.environ["CORE_CB_OUT"], "w") as f:
            ls = sorted(longs)
            f.write(f"callbacks >2ms: {len(ls)} total {sum(ls):.1f}s p50 {ls[len(ls)//2]*1e3 if ls else 0:.1f} p99 {ls[int(len(ls)*.99)]*1e3 if ls else 0:.1f} max {ls[-1]*1e3 if ls else 0:.1f}ms\n")
            with open(os.environ["CORE_CB_OUT"] + ".tl", "w") as g:
                for t, d, n in tl: g.write("%.3f %.2f %s\n" % (t, d * 1e3, n))
            for n, c in tot.most_common(25):
                v = sorted(per[n]); f.write(f"{c:8.2f}s {hist[n]:6d} p50 {v[len(v)//2]*1e3:6.1f} p99 {v[int(len(v)*.99)]*1e3:6.1f} max {v[-1]*1e3:6.1f} {n}\n")
    atexit.register(dump)
if os.environ.get("RC_OUT") and "coordinator" in sys.argv[1:3]:
    # time each accept of the gRPC server: task created -> first step -> request matched
    import asyncio, atexit
    from coordinator.edge import hop
    recs = []
    orig_run = hop.EdgeLoop._run
    def _run(self):
        loop = self.loop
        octask = loop.create_task
        def create_task(coro, *a, **k):
            name = getattr(coro, "__qualname__", "")
            if "request_registered_call" in name or name.endswith("_request_call"):
                tc = time.monotonic()
                inner = coro
                async def w():
                    ts = time.monotonic()
                    r = await inner
                    recs.append((tc, ts, time.monotonic()))
                    return r
                coro = w()
            return octask(coro, *a, **k)
        loop.create_task = create_task
        orig_run(self)
    hop.EdgeLoop._run = _run
    def dump():
        with open(os.environ["RC_OUT"], "w") as f:
            for r in recs: f.write("%.6f %.6f %.6f\n" % r)
    atexit.register(dump)
if os.environ.get("SWI") and "coordinator" in sys.argv[1:3]:
    sys.setswitchinterval(float(os.environ["SWI"]))
if os.environ.get("NICE") and "coordinator" in sys.argv[1:3]:
    os.nice(int(os.environ["NICE"]))
if os.environ.get("PASS_OUT") and "coordinator" in sys.argv[1:3]:
    import atexit
    from coordinator.core import control as _ctl, scheduler as _sch
    prec = []
    oplace = _sch.Scheduler.place
    def place(self, *a, **k):
        t = time.perf_counter(); r = oplace(self, *a, **k); self._probe_place = time.perf_counter() - t
        self._probe_n = len(r); self._probe_ranks = sum(len(d.worker_ids) for d in r); return r
    _sch.Scheduler.place = place
    osched = _ctl.Control.schedule
    def schedule(self):
        t = time.perf_counter(); osched(self); d = time.perf_counter() - t
        s = self.scheduler
        prec.append((time.time(), d, getattr(s, "_probe_place", 0), getattr(s, "_probe_n", 0), getattr(s, "_probe_ranks", 0), len(s._jobs)))
    _ctl.Control.schedule = schedule
    def pdump():
        with open(os.environ["PASS_OUT"], "w") as f:
            for r in prec: f.write("%.4f %.2f %.2f %d %d %d\n" % (r[0], r[1]*1e3, r[2]*1e3, r[3], r[4], r[5]))
    atexit.register(pdump)
if os.environ.get("PLACE_PROF") and "coordinator" in sys.argv[1:3]:
    import cProfile, pstats, atexit
    from coordinator.core import control as _ctl2
    _pr = cProfile.Profile()
    _os2 = _ctl2.Control.schedule
    def schedule2(self):
        _pr.enable()
        try: _os2(self)
        finally: _pr.disable()
    _ctl2.Control.schedule = schedule2
    def _pd():
        with open(os.environ["PLACE_PROF"], "w") as f:
            pstats.Stats(_pr, stream=f).sort_stats("tottime").print_stats(30)
            pstats.Stats(_pr, stream=f).sort_stats("cumtime").print_stats(40)
    atexit.register(_pd)
if os.environ.get("GC_OUT") and "coordinator" in sys.argv[1:3]:
    import gc, atexit
    _g = []; _st = {}
    def _gcb(phase, info):
        if phase == "start":
            _st["t"] = time.perf_counter(); _st["c"] = gc.get_count(); _st["th"] = threading.current_thread().name
        else:
            _g.append((time.monotonic(), (time.perf_counter() - _st["t"]) * 1e3, info.get("generation"), _st["c"], info.get("collected"), info.get("uncollectable"), _st["th"]))
    gc.callbacks.append(_gcb)
    def _gd():
        with open(os.environ["GC_OUT"], "w") as f:
            for r in _g: f.write("%.3f %.2f gen%s count%s collected %s unc %s %s\n" % r)
    atexit.register(_gd)
if os.environ.get("GCY") and "coordinator" in sys.argv[1:3]:
    import coordinator.core.gcpace as _pp
    _pp.GC_YOUNG = int(os.environ["GCY"])
    if os.environ.get("GCY1"):
        _osti = __import__("gc").set_threshold
        def _sti(a, *rest):
            _osti(a, int(os.environ["GCY1"]), *rest[1:])
        __import__("gc").set_threshold = _sti
if os.environ.get("GARB_OUT") and "coordinator" in sys.argv[1:3]:
    import gc, collections as _c
    def _garb():
        cnt, codes, n = _c.Counter(), _c.Counter(), 0
        t_end = time.time() + 90
        time.sleep(20)
        while time.time() < t_end:
            time.sleep(2)
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect(1)
            gc.set_debug(0)
            n += len(gc.garbage)
            for o in gc.garbage:
                cnt[type(o).__module__ + "." + type(o).__qualname__] += 1
                co = getattr(o, "f_code", None) or getattr(o, "cr_code", None)
                if co is not None: codes[co.co_qualname] += 1
            gc.garbage.clear()
            with open(os.environ["GARB_OUT"], "w") as f:
                f.write(f"cyclic garbage objects: {n}\n")
                for k, v in cnt.most_common(40): f.write(f"{v:7d} {k}\n")
                f.write("frames/coroutines by code:\n")
                for k, v in codes.most_common(30): f.write(f"{v:7d} {k}\n")
    threading.Thread(target=_garb, daemon=True).start()
if os.environ.get("THR_OUT") and "coordinator" in sys.argv[1:3]:
    def _thr():
        pid = os.getpid(); tick = os.sysconf("SC_CLK_TCK")
        def snap():
            out = {}
            for tid in os.listdir(f"/proc/{pid}/task"):
                try:
                    st = open(f"/proc/{pid}/task/{tid}/stat").read()
                    name = st[st.index("(") + 1: st.rindex(")")]
                    f = st[st.rindex(")") + 2:].split()
                    sched = open(f"/proc/{pid}/task/{tid}/schedstat").read().split()
                    out[tid] = (name, (int(f[11]) + int(f[12])) / tick, int(sched[1]) / 1e9)
                except OSError:
                    pass
            return out
        time.sleep(35); a = snap(); time.sleep(20); b = snap()
        with open(os.environ["THR_OUT"], "w") as fo:
            fo.write(f"threads {len(b)}\n")
            rows = []
            for tid, (name, cpu, wait) in b.items():
                c0, w0 = (a[tid][1], a[tid][2]) if tid in a else (0, 0)
                rows.append((cpu - c0, wait - w0, name, tid))
            for r in sorted(rows, reverse=True): fo.write("cpu %.2f s  runqueue wait %.2f s  %s %s\n" % r)
    threading.Thread(target=_thr, daemon=True).start()
if os.environ.get("FREEZE_FULL") and "coordinator" in sys.argv[1:3]:
    # Experiment (r13): after each full collection, freeze its survivors, so the next full pass
    # scans only what came since. At exit: unfreeze and collect, to count what the frozen set leaked.
    import gc, atexit
    _fz = {"n": 0}
    def _fcb(phase, info):
        if phase == "stop" and info.get("generation") == 2:
            gc.freeze(); _fz["n"] += 1
    gc.callbacks.append(_fcb)
    def _fzd():
        frozen = gc.get_freeze_count(); gc.unfreeze()
        gc.set_debug(gc.DEBUG_SAVEALL); leaked = gc.collect(); gc.set_debug(0)
        import collections as _c
        kinds = _c.Counter(type(o).__qualname__ for o in gc.garbage)
        with open(os.environ["FREEZE_FULL"], "w") as f:
            f.write(f"freezes {_fz['n']} frozen_at_exit {frozen} cyclic_garbage_at_exit {leaked}\n")
            for k, v in kinds.most_common(25): f.write(f"{v:7d} {k}\n")
    atexit.register(_fzd)
if os.environ.get("HOP_OUT") and "coordinator" in sys.argv[1:3]:
    # r19: each hopped user call's phases: edge handler start -> body start on the core -> body end
    # -> answer back on the edge (perf_counter), with its wall time, for the core callback timeline.
    import atexit, inspect as _insp
    from coordinator.edge import hop as _hop
    _hrec = []
    def _hopped_probe(method, core, edge):
        name = method.__name__
        async def unary(request, context):
            t0, st = time.perf_counter(), [0.0, 0.0]
            w0 = time.time()
            async def body():
                st[0] = time.perf_counter()
                answer = method(request, _hop.EdgeContext(context, edge))
                r = (await answer) if _insp.isawaitable(answer) else answer
                st[1] = time.perf_counter()
                return r
            try:
                return await _hop.on(core, body(), _hop.client(context))
            finally:
                _hrec.append((w0, name, _hop.client(context), st[0] - t0 if st[0] else -1,
                              st[1] - st[0] if st[1] else -1, time.perf_counter() - (st[1] or t0)))
        return unary
    _hop._hopped = _hopped_probe
    def _hdump():
        with open(os.environ["HOP_OUT"], "w") as f:
            for r in _hrec:
                f.write("%.4f %s %s %.2f %.2f %.2f\n" % (r[0], r[1], r[2], r[3] * 1e3, r[4] * 1e3, r[5] * 1e3))
    atexit.register(_hdump)
if os.environ.get("GARB2_OUT") and "coordinator" in sys.argv[1:3]:
    # r19: every second, the cyclic garbage made since the last look, by type and by code, with its time.
    import gc, collections as _c
    def _garb2():
        t_end = time.time() + float(os.environ.get("GARB2_FOR", "150"))
        with open(os.environ["GARB2_OUT"], "w") as f:
            while time.time() < t_end:
                time.sleep(1)
                gc.set_debug(gc.DEBUG_SAVEALL)
                gc.collect()
                gc.set_debug(0)
                n = len(gc.garbage)
                if n > 2000:
                    cnt, codes = _c.Counter(), _c.Counter()
                    for o in gc.garbage:
                        cnt[type(o).__module__ + "." + type(o).__qualname__] += 1
                        co = getattr(o, "f_code", None) or getattr(o, "cr_code", None) or getattr(o, "gi_code", None)
                        if co is not None: codes[co.co_qualname] += 1
                    f.write(f"{time.time():.2f} garbage {n}: " + ", ".join(f"{k} {v}" for k, v in cnt.most_common(12))
                            + " | code: " + ", ".join(f"{k} {v}" for k, v in codes.most_common(8)) + "\n")
                else:
                    f.write(f"{time.time():.2f} garbage {n}\n")
                f.flush()
                gc.garbage.clear()
                gc.collect()  # the saved cycles themselves, freed now
    threading.Thread(target=_garb2, daemon=True).start()
if os.environ.get("GENS_OUT") and "coordinator" in sys.argv[1:3]:
    # r20: every half second, CPython's young/middle counts beside the real sizes of those generations.
    import gc
    def _gens():
        with open(os.environ["GENS_OUT"], "w") as f:
            while True:
                time.sleep(0.5)
                c = gc.get_count()
                f.write("%.2f count %s young %d middle %d\n" % (time.time(), c, len(gc.get_objects(0)), len(gc.get_objects(1))))
                f.flush()
    threading.Thread(target=_gens, daemon=True).start()
if os.environ.get("CENSUS_OUT") and "coordinator" in sys.argv[1:3]:
    # r20: every CENSUS_EVERY s, what the young and middle generations hold, by type (dicts by keys, tuples by shape).
    import gc, collections as _c
    def _shape(o):
        t = type(o)
        n = t.__module__ + "." + t.__qualname__
        if t is dict:
            return n + "{" + ",".join(sorted(str(k) for k in list(o)[:5])) + "}"
        if t is tuple:
            return n + "(" + ",".join(type(x).__name__ for x in o[:4]) + ")"
        if t is list:
            return n + "[" + (type(o[0]).__name__ if o else "") + "]"
        co = getattr(o, "__code__", None) or getattr(o, "cr_code", None) or getattr(o, "f_code", None)
        if co is not None:
            return n + ":" + co.co_qualname
        return n
    def _census():
        every = float(os.environ.get("CENSUS_EVERY", "3"))
        with open(os.environ["CENSUS_OUT"], "w") as f:
            while True:
                time.sleep(every)
                for g in (0, 1):
                    objs = gc.get_objects(g)
                    if len(objs) < 5000:
                        continue
                    c = _c.Counter(_shape(o) for o in objs)
                    f.write(f"{time.time():.2f} gen{g} {len(objs)}: " + "; ".join(f"{k} {v}" for k, v in c.most_common(30)) + "\n")
                    del objs, c
                f.flush()
    threading.Thread(target=_census, daemon=True).start()
