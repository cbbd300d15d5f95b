import sys, collections
rows = [l.split() for l in open(sys.argv[1])]
t0 = float(rows[0][0])
by = collections.defaultdict(list)
for r in rows:
    by[int(float(r[0]) - t0)].append((float(r[1]), float(r[2]), r[3], int(r[4]), int(r[5])))
for s in sorted(by):
    it = by[s]
    n = len(it); wall = sum(x[0] for x in it); sel0 = [x[1] for x in it if x[2] == "0"]; selw = [x[1] for x in it if x[2] != "0"]
    ev = sum(x[3] for x in it)
    srt = sorted(x[0] for x in it)
    print(f"{s:3d} iters {n:6d} busy {wall:7.0f}ms  p50 {srt[n//2]:.2f} p99 {srt[int(n*.99)]:.2f} | sel(t=0) n={len(sel0)} sum {sum(sel0):6.0f}ms max {max(sel0, default=0):5.1f} | sel(wait) n={len(selw)} sum {sum(selw):6.0f} | events {ev}")
