import sys, glob, collections
S = {}
for p in glob.glob(sys.argv[1] + ".*"):
    for line in open(p):
        a = line.split()
        if a[0] == "S": S[a[1]] = (a[2], float(a[3]), float(a[4]), float(a[5]))
t_start = min(float(k) for k in S)
by = collections.defaultdict(lambda: collections.defaultdict(list))
for k, (n, ti, th, te) in S.items():
    by[int(ti - t_start)][n].append(1e3 * (ti - float(k)))
for s in sorted(by):
    row = by[s]
    tot = sum(len(v) for v in row.values())
    print(s, "accepted/s", tot, " ".join(f"{n[:6]}:{len(v)}/{max(v):.0f}" for n, v in sorted(row.items())))
