# Experiment only (r9): in the coordinator process, each event loop's busy time per turn (the
# turn's time less its select wait), by thread, written every 10 s to $TURNS_OUT.<thread>.
import os, sys
if "coordinator" in sys.argv[1:2] and os.environ.get("TURNS_OUT"):
    import asyncio.base_events as be, threading, time, atexit, json
    _orig = be.BaseEventLoop._run_once
    stats = {}
    def _run_once(self):
        sel = self._selector
        if not getattr(sel, "_timed", False):
            inner = sel.select
            def select(timeout=None, _inner=inner, _sel=sel):
                t = time.perf_counter()
                try:
                    return _inner(timeout)
                finally:
                    _sel._waited += time.perf_counter() - t
            sel.select, sel._timed, sel._waited = select, True, 0.0
        sel._waited = 0.0
        t0 = time.perf_counter()
        _orig(self)
        busy = time.perf_counter() - t0 - sel._waited
        name = threading.current_thread().name
        stats.setdefault(name, []).append(busy)
    be.BaseEventLoop._run_once = _run_once
    def dump():
        out = {}
        for name, xs in list(stats.items()):
            xs = sorted(xs)
            if not xs: continue
            n = len(xs)
            out[name] = dict(turns=n, busy_s=round(sum(xs), 3), p50_ms=round(xs[n // 2] * 1e3, 3),
                             p90_ms=round(xs[int(n * .9)] * 1e3, 3), p99_ms=round(xs[int(n * .99)] * 1e3, 3),
                             max_ms=round(xs[-1] * 1e3, 1), over_5ms=sum(x > .005 for x in xs), over_20ms=sum(x > .02 for x in xs))
        with open(os.environ["TURNS_OUT"] + f".{os.getpid()}", "a") as f:
            f.write(json.dumps(dict(t=time.time(), loops=out)) + "\n")
        stats.clear()
    def every():
        while True:
            time.sleep(10)
            dump()
    threading.Thread(target=every, daemon=True).start()

# Per call, where a hopped unary call's time goes: the hop to the core, the body, the hop back.
if "coordinator" in sys.argv[1:2] and os.environ.get("TURNS_OUT"):
    try:
        import inspect as _inspect
        from coordinator.edge import hop as _hop
        _calls = []
        def _hopped(method, core, edge, _h=_hop):
            name = getattr(method, "__name__", "?")
            async def unary(request, context):
                t_in = time.perf_counter()
                marks = {}
                async def body():
                    marks["start"] = time.perf_counter()
                    answer = method(request, _h.EdgeContext(context, edge))
                    answer = (await answer) if _inspect.isawaitable(answer) else answer
                    marks["end"] = time.perf_counter()
                    return answer
                try:
                    return await _h.on(core, body())
                finally:
                    t_back = time.perf_counter()
                    if "end" in marks:
                        _calls.append((name, marks["start"] - t_in, marks["end"] - marks["start"], t_back - marks["end"]))
            return unary
        _hop._hopped = _hopped
        def _dump_calls():
            by = {}
            for name, a, b, c in _calls:
                by.setdefault(name, []).append((a, b, c))
            _calls.clear()
            out = {}
            for name, rows in by.items():
                n = len(rows)
                def pct(i, q):
                    xs = sorted(r[i] for r in rows)
                    return round(xs[min(n - 1, int(n * q))] * 1e3, 3)
                out[name] = dict(n=n, **{f"{part}_{q}": pct(i, qq) for i, part in enumerate(("hop_in", "body", "hop_back"))
                                         for q, qq in (("p50", .5), ("p99", .99))})
            with open(os.environ["TURNS_OUT"] + f".calls.{os.getpid()}", "a") as f:
                f.write(json.dumps(dict(t=time.time(), calls=out)) + "\n")
        def _every_calls():
            while True:
                time.sleep(10)
                _dump_calls()
        threading.Thread(target=_every_calls, daemon=True).start()
    except Exception as exc:  # an old tree without the edge loop
        pass
