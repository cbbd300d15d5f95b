# Experiment only (r9): oneloop-sitecustomize.py, and each unary handler's own time (entry to
# return, on the one loop) written every 10 s to $TURNS_OUT.calls: what a call waited for before
# its handler started is the client's time less this.
import os, sys, time, json, threading
if "coordinator" in sys.argv[1:2]:
    import asyncio, inspect
    from coordinator.edge import hop, server
    _calls = []

    class SameLoop:
        def __init__(self):
            self.loop = asyncio.get_running_loop()
        async def _await(self, coro):
            return await coro
        def run(self, coro):
            return self._await(coro)
        def close(self):
            pass

    def _hopped(method, core, edge):
        name = getattr(method, "__name__", "?")
        async def unary(request, context):
            t0 = time.perf_counter()
            try:
                answer = method(request, context)
                return (await answer) if inspect.isawaitable(answer) else answer
            finally:
                _calls.append((name, time.perf_counter() - t0))
        return unary

    server.EdgeLoop = SameLoop
    hop._hopped = _hopped

    def _every():
        while True:
            time.sleep(10)
            by = {}
            for name, d in list(_calls):
                by.setdefault(name, []).append(d)
            _calls.clear()
            out = {}
            for name, xs in by.items():
                xs.sort()
                n = len(xs)
                out[name] = dict(n=n, p50_ms=round(xs[n // 2] * 1e3, 2), p99_ms=round(xs[min(n - 1, int(n * .99))] * 1e3, 2), max_ms=round(xs[-1] * 1e3, 1))
            with open(os.environ.get("TURNS_OUT", "/tmp/oneloop2") + ".calls", "a") as f:
                f.write(json.dumps(dict(t=time.time(), calls=out)) + "\n")
    threading.Thread(target=_every, daemon=True).start()
