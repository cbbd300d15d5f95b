# Probe: the edge loop's iterations (wall, handles run, time inside select incl. the GIL re-take).
import os, time, threading, atexit
def install(loop, out):
    recs = []
    sel = loop._selector
    osel = sel.select
    cur = {}
    def select(timeout=None):
        t = time.perf_counter()
        r = osel(timeout)
        cur["sel"] = time.perf_counter() - t
        cur["to"] = timeout
        cur["n"] = len(r)
        return r
    sel.select = select
    orig = type(loop)._run_once
    def _run_once():
        t = time.perf_counter()
        orig(loop)
        d = time.perf_counter() - t
        recs.append((time.monotonic(), d, cur.get("sel", 0), cur.get("to"), cur.get("n", 0), len(loop._ready)))
        if len(recs) >= 20000:
            dump()
    def dump():
        with open(out, "a") as f:
            for r in recs:
                f.write("%.4f %.3f %.3f %s %d %d\n" % (r[0], r[1]*1e3, r[2]*1e3, r[3], r[4], r[5]))
        recs.clear()
    loop._run_once = _run_once
    atexit.register(dump)
