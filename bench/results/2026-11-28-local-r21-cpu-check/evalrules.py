import json, sys, statistics, random
sys.path.insert(0, ".")
from ringleader.checkmath import flags
med = statistics.median
def rule_best(fig, passes):  # fig[r][p] -> flagged list
    best = [max(fig[r][:passes]) for r in range(len(fig))]
    b = flags.bound(best); return [x < b for x in best]
def rule_rel(fig, passes):
    R = len(fig)
    rel = [[fig[r][p] / med([fig[q][p] for q in range(R)]) for p in range(passes)] for r in range(R)]
    score = [max(x) for x in rel]
    b = flags.bound(score); return [x < b for x in score]
def run(rule, fig):
    f = rule(fig, 3)
    if any(f): f = rule(fig, 6)
    return f
trials = [json.loads(l) for l in open(sys.argv[1])]
for kind, idx in (("tflops", 0), ("copy", 1)):
    for name, rule in (("best", rule_best), ("rel", rule_rel)):
        fp = 0; det = {2: 0, 1.5: 0, 1.3: 0}
        for t in trials:
            fig = [[p[idx] for p in t[r]] for r in range(4)]
            fp += any(run(rule, fig))
            for s in det:
                for k in range(4):
                    g = [row[:] for row in fig]; g[k] = [x / s for x in g[k]]
                    fl = run(rule, g)
                    det[s] += fl[k] and not any(fl[j] for j in range(4) if j != k)
        n = len(trials)
        print(f"{kind:6} {name:4} false-positive trials {fp}/{n}  clean-detect " +
              " ".join(f"x{s}:{det[s]}/{4*n}" for s in det))
