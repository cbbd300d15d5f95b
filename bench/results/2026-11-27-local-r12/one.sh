# one local churn run (write-behind unless DB set) with the probes; TAG names it; extra env before
cd /work/main; T=$1; shift
rm -f .dev/ts/$T.* .dev/ts/$T-pc.txt
env "$@" PROBE_CLIENT_OUT=/work/main/.dev/ts/$T-pc.txt TS_OUT=/work/main/.dev/ts/$T PYTHONPATH=/work/main:/work/main/.dev/ts .venv/bin/python bench/control_plane.py --workers ${W:-3000} --queue $(( ${W:-3000} * 2 )) --churn --duration 30 --db ${DB:-sqlite-behind} --out .dev/ts/run-$T > .dev/ts/run-$T.log 2>&1
echo "== $T $*"; tail -1 .dev/ts/run-$T.log | sed 's/.*queued/queued/; s/| CPU us \/ heartbeat.*//'
python3 - $T <<'PY'
import sys, json
r = json.load(open(f"/work/main/.dev/ts/run-{sys.argv[1]}/results.json"))["runs"][0]
print("drain_s", r.get("drain_s"), "jobs", r.get("jobs_finished"), "per10s submit p99", [round(x) for x in r["submit"]["p99_ms_per_10s"]])
rows = [l.split() for l in open(f"/work/main/.dev/ts/{sys.argv[1]}-pc.txt")]
for k in ("health", "getjob"):
    v = sorted(float(x[2]) for x in rows if x[0] == k)
    print("probe", k, "p50 %.1f p99 %.1f max %.1f" % (v[len(v)//2], v[int(len(v)*.99)], v[-1]))
PY
