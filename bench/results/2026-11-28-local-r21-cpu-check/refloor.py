"""Re-judge the recorded clean runs' copy and TFLOP/s under each floor (the figures as reported;
bounds recomputed with flags.bound)."""
import json, sys
sys.path.insert(0, ".")
from ringleader.checkmath import flags
from collections import defaultdict
res = defaultdict(lambda: defaultdict(int)); low = defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l); cb = r.get("cb", 0); res[cb]["runs"] += 1
    rows = r["rows"]
    for floor in (0.3, 0.4):
        false = False
        for k in ("t", "c"):
            b = flags.bound([w[k] for w in rows], floor)
            false |= any(w[k] < b for w in rows if w["w"] != "f2")
        res[cb][f"false@{floor}"] += false
    med = sorted(w["c"] for w in rows)
    for w in rows:
        if w["w"] != "f2": low[cb].append(w["cr"])
for cb in res: print("copy_bytes", cb, "(0: the default of the tree that ran)", dict(res[cb]), "lowest clean copy ratios", sorted(low[cb])[:4])
