# Experiment: time per callback kind on the core loop (MainThread), every 10 s.
import os, sys
if "coordinator" in sys.argv[1:2] and os.environ.get("CBS_OUT"):
    import asyncio.events as ev, threading, time, json, collections
    orig = ev.Handle._run
    acc = collections.defaultdict(lambda: [0, 0.0, 0.0])
    main = threading.main_thread()
    def name_of(h):
        cb = h._callback
        if hasattr(cb, "__self__") and isinstance(cb.__self__, asyncio_Task):
            coro = cb.__self__.get_coro()
            return "task:" + getattr(coro, "__qualname__", str(coro))
        return getattr(cb, "__qualname__", repr(cb))[:80]
    import asyncio
    asyncio_Task = asyncio.Task
    def _run(self):
        if threading.current_thread() is not main:
            return orig(self)
        t = time.perf_counter()
        try:
            return orig(self)
        finally:
            d = time.perf_counter() - t
            try:
                a = acc[name_of(self)]
            except Exception:
                a = acc["?"]
            a[0] += 1; a[1] += d; a[2] = max(a[2], d)
    ev.Handle._run = _run
    def every():
        while True:
            time.sleep(10)
            items = sorted(acc.items(), key=lambda kv: -kv[1][1])[:25]
            acc.clear()
            with open(os.environ["CBS_OUT"], "a") as f:
                f.write(json.dumps(dict(t=time.time(), top=[(k, n, round(s, 3), round(m * 1e3, 1)) for k, (n, s, m) in items])) + "\n")
    threading.Thread(target=every, daemon=True).start()
