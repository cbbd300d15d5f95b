import sys, glob, collections
S = []
for p in glob.glob(sys.argv[1] + ".*"):
    for line in open(p):
        a = line.split()
        if a[0] == "S": S.append((a[2], float(a[1]), float(a[3])))
by = collections.defaultdict(list)
for n, t0, ti in S: by[n].append((ti, ti - t0))
for n, xs in by.items():
    xs.sort()
    gaps = [1e3*(b[0]-a[0]) for a, b in zip(xs, xs[1:]) if b[1] > 0.2]  # accepted while backed up
    if len(gaps) < 10: continue
    gaps.sort()
    print(n, "backlogged accepts", len(gaps), "gap ms p10 %.1f p50 %.1f p90 %.1f" % (gaps[len(gaps)//10], gaps[len(gaps)//2], gaps[9*len(gaps)//10]))
# all methods together
xs = sorted((ti, ti - t0) for n, t0, ti in S)
gaps = sorted(1e3*(b[0]-a[0]) for a, b in zip(xs, xs[1:]) if b[1] > 0.2)
print("ALL", len(gaps), "gap p10 %.2f p50 %.2f p90 %.2f" % (gaps[len(gaps)//10], gaps[len(gaps)//2], gaps[9*len(gaps)//10]))
