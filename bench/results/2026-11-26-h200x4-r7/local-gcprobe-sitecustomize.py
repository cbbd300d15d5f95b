# EXPERIMENT (not committed): in the coordinator, from 45 s after start, at the start of a young
# pass (at most one every 4 s), log the commonest types among the objects of generations 0 and 1.
import collections, gc, sys, time
_t0 = time.monotonic()
_last = [0.0]
def _probe(phase, info):
    if "coordinator" not in sys.argv or phase != "start" or time.monotonic() - _t0 < 45 or time.monotonic() - _last[0] < 4:
        return
    _last[0] = time.monotonic()
    g = info.get("generation")
    c = collections.Counter(type(o).__qualname__ for gen in (0, 1) for o in gc.get_objects(gen))
    sys.stderr.write(f"GCPROBE {time.strftime('%T')} gen{g} start, young {sum(c.values())}: "
                     + ", ".join(f"{k} {v}" for k, v in c.most_common(16)) + "\n")
gc.callbacks.append(_probe)
