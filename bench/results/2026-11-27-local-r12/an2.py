import sys, glob
S, C = {}, {}
for p in glob.glob(sys.argv[1] + ".*"):
    if not p.split(".")[-1].isdigit(): continue
    for line in open(p):
        a = line.split()
        if a[0] == "S": S[a[1]] = (a[2], float(a[3]), float(a[4]), float(a[5]))
        elif a[0] == "C": C[a[1]] = float(a[2])
g = sorted((float(k), v) for k, v in S.items() if v[0] == "GetJob" and k in C)
t0 = g[0][0]
def q(xs, p): xs = sorted(xs); return xs[min(len(xs)-1, int(p*len(xs)))] if xs else 0
for lo in range(0, 35, 5):
    rows = [(k, v) for k, v in g if lo <= k - t0 < lo + 5]
    acc = [1e3*(v[1]-k) for k, v in rows]; body = [1e3*(v[3]-v[2]) for k, v in rows]; tot = [1e3*(C[f"{k:.6f}"]-k) for k, v in rows]
    print(f"{lo:2d}-{lo+5:2d}s n={len(rows):3d} accept p50 {q(acc,.5):6.1f} p99 {q(acc,.99):6.1f} | body p50 {q(body,.5):6.1f} p99 {q(body,.99):6.1f} | total p99 {q(tot,.99):6.1f}")
