import os, time, atexit
import sys
if os.environ.get("SWI_S"):
    sys.setswitchinterval(float(os.environ["SWI_S"]))
if os.environ.get("WRI_OUT"):
    try:
        from coordinator.store import sqlite_writer as sw
        f = open(os.environ['WRI_OUT'] + f'.{os.getpid()}', 'w', buffering=1)
        class R:
            def append(self, r): f.write(f'{time.monotonic():.3f} ' + ' '.join(str(x) for x in r) + '\n')
        rec = R()
        orig = sw.SqliteGroupWriter._write
        orig_lev = sw.levelled
        def lev(ops):
            t = time.perf_counter(); out = orig_lev(ops); rec.append(("lev", time.perf_counter() - t, sum(len(r) for _, r in ops), len(out)))
            return out
        sw.levelled = lev
        def _write(self, ops, shares):
            t0 = time.perf_counter(); c0 = time.thread_time()
            try:
                return orig(self, ops, shares)
            finally:
                rec.append(("tx", time.perf_counter() - t0, time.thread_time() - c0, sum(len(r) for _, r in ops)))
        sw.SqliteGroupWriter._write = _write
    except Exception as e:
        pass
