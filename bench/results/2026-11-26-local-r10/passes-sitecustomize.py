# Experiment: per placement pass, time, decisions, needs visited, workers claimed; every 10 s.
import os, sys
if "coordinator" in sys.argv[1:2] and os.environ.get("PASSES_OUT"):
    import time, json, threading
    from coordinator.core import scheduler as S
    rows = []
    seen_needs = set()
    orig_place, orig_reserve = S.Scheduler.place, S.Scheduler._reserve
    orig_walk = S.KindQueues.walk
    cur = {}
    def walk(self, kinds, head):
        for need in orig_walk(self, kinds, head):
            cur["visits"] = cur.get("visits", 0) + 1
            yield need
    def _reserve(self, need, pools, claims):
        n = sum(v for h in pools.values() for v in h.values())
        orig_reserve(self, need, pools, claims)
        cur["reserved"] = cur.get("reserved", 0) + n
        cur["blocked"] = cur.get("blocked", 0) + 1
        if n > 100 and len(seen_needs) < 5 and need not in seen_needs:
            seen_needs.add(need)
            job = self._jobs[self._groups[need].head()]
            with open(os.environ["PASSES_OUT"] + ".needs", "a") as f:
                f.write(f"{job.job_id} ws={need.world_size} backends={sorted(need.backends)} host={need.host!r} dev={need.device_type!r} ids={len(need.worker_ids)} reserved={n} idle={self._fleet.n_idle}\n")
        return n
    def place(self, warm=None):
        cur.clear()
        t = time.perf_counter()
        d = orig_place(self, warm)
        rows.append((time.perf_counter() - t, len(d), cur.get("visits", 0), cur.get("reserved", 0), cur.get("blocked", 0), self._fleet.n_idle, len(self._jobs), len(self._groups)))
        return d
    S.Scheduler.place, S.Scheduler._reserve, S.KindQueues.walk = place, _reserve, walk
    def every():
        while True:
            time.sleep(10)
            xs = list(rows); rows.clear()
            if not xs: continue
            ts = sorted(r[0] for r in xs); n = len(xs)
            out = dict(t=time.time(), passes=n, busy_s=round(sum(ts), 3), p50_ms=round(ts[n//2]*1e3, 3), p99_ms=round(ts[int(n*.99)]*1e3, 3), max_ms=round(ts[-1]*1e3, 2),
                       decisions=sum(r[1] for r in xs), visits_mean=round(sum(r[2] for r in xs)/n, 1), visits_max=max(r[2] for r in xs),
                       reserved_mean=round(sum(r[3] for r in xs)/n, 1), blocked_mean=round(sum(r[4] for r in xs)/n, 1),
                       idle_mean=round(sum(r[5] for r in xs)/n, 1), queued_last=xs[-1][6], needs_last=xs[-1][7])
            with open(os.environ["PASSES_OUT"], "a") as f:
                f.write(json.dumps(out) + "\n")
    threading.Thread(target=every, daemon=True).start()
