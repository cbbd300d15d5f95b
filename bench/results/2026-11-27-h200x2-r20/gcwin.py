"""Per run: collection passes inside the measured window (results.json's window_wall): count by
generation, the longest, their sum; and the longest outside it. Usage: gcwin.py CALLDIR..."""
import glob, json, os, sys
for d in sys.argv[1:]:
    for res in sorted(glob.glob(f"{d}/cp/*/results.json")):
        name = os.path.basename(os.path.dirname(res))
        scen, k, which = name.split("-", 2)
        r = json.load(open(res))["runs"][0]
        a, b = r["window_wall"]
        g = f"{d}/logs/gc-{k}-{which}-{scen}.txt"
        rows = [l.split() for l in open(g)] if os.path.exists(g) else []
        inw = [(float(x[2]), int(x[6]), int(x[8]), float(x[0]) - a) for x in rows if a <= float(x[0]) <= b]
        out = [float(x[2]) for x in rows if not a <= float(x[0]) <= b]
        by = {}
        for w, gen, c, t in inw:
            by.setdefault(gen, []).append(w)
        top = max(inw, default=(0, -1, 0, 0))
        print(f"{d.split('/')[-1]} {name}: p99 {r['submit']['p99_ms']:.1f}/{r['get']['p99_ms']:.1f}/{r['list_workers']['p99_ms']:.1f}"
              f" drain {r.get('drain_s') or 0:.1f} cpu/job {r.get('cpu_ms_per_job') or 0:.2f} | in window: "
              + ", ".join(f"gen{gg} {len(v)} passes max {max(v):.1f} sum {sum(v):.0f}" for gg, v in sorted(by.items()))
              + f" | longest {top[0]:.1f} ms gen{top[1]} freed {top[2]} at {top[3]:.1f} s | outside max {max(out, default=0):.1f}")
