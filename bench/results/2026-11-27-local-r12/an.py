import sys, glob, statistics as st
S, C = {}, {}
for p in glob.glob(sys.argv[1] + ".*"):
    for line in open(p):
        a = line.split()
        if a[0] == "S": S[a[1]] = (a[2], float(a[3]), float(a[4]), float(a[5]))
        elif a[0] == "C": C[a[1]] = float(a[2])
def q(xs, p): xs = sorted(xs); return xs[min(len(xs)-1, int(p*len(xs)))]
for name in sorted({v[0] for v in S.values()}):
    rows = [(float(k),) + v[1:] + (C.get(k),) for k, v in S.items() if v[0] == name and k in C]
    if not rows: continue
    acc = [1e3*(ti - t0) for t0, ti, th, te, tc in rows]
    rcv = [1e3*(th - ti) for t0, ti, th, te, tc in rows]
    body = [1e3*(te - th) for t0, ti, th, te, tc in rows]
    back = [1e3*(tc - te) for t0, ti, th, te, tc in rows]
    tot = [1e3*(tc - t0) for t0, ti, th, te, tc in rows]
    print(f"{name} n={len(rows)}")
    for lab, xs in (("send->interceptor", acc), ("interceptor->handler", rcv), ("handler body", body), ("end->client", back), ("total", tot)):
        print(f"  {lab:22s} p50 {q(xs,.5):8.1f} p90 {q(xs,.9):8.1f} p99 {q(xs,.99):8.1f} max {max(xs):8.1f}")
