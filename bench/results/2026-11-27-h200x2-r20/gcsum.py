import sys, re
# summary of a GC2 log: passes by generation, longest, sum, passes > 20 ms (after the first 5 s)
for p in sys.argv[1:]:
    rows = [l.split() for l in open(p)]
    t0 = float(rows[0][0]) if rows else 0
    by = {}
    for r in rows:
        g = int(r[6]); w = float(r[2]); by.setdefault(g, []).append(w)
    longs = [(round(float(r[0]) - t0, 1), float(r[2]), int(r[6]), int(r[8])) for r in rows if float(r[2]) > 20]
    print(p, {g: (len(v), round(max(v), 1), round(sum(v), 1)) for g, v in sorted(by.items())}, "long:", longs[:12])
