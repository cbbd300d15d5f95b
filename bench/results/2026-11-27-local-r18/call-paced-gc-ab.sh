#!/bin/bash
# Local A/B (r18, not kept): young passes paced by users' calls (call-paced-gc.patch, post, on 4661718) against none
# (pre = 4661718 at /tmp/ab-pre); relay on, 2,000 workers draining 4,000; the GC probe logs each pass.
PY=/work/main/.venv/bin/python
k=0
for which in post pre pre post; do
  k=$((k+1)); dir=/work/wt; [ $which = pre ] && dir=/tmp/ab-pre
  (cd $dir && GCP_OUT=/tmp/r18/pace-gc-$k-$which PYTHONPATH=$dir:/tmp/probe timeout 400 $PY bench/control_plane.py --workers 2000 --queue 4000 --churn --duration 30 --worker-relay --out /tmp/r18/pace-$k-$which > /tmp/r18/pace-$k-$which.txt 2>&1)
  $PY - /tmp/r18/pace-$k-$which/results.json $k-$which /tmp/r18/pace-gc-$k-$which.coordinator >> /tmp/r18/pace.txt 2>&1 <<'PYEOF'
import json,sys
r=json.load(open(sys.argv[1]))['runs'][0]
rows=[l.split() for l in open(sys.argv[3]) if l.strip()]
drain=[(float(x[2]),x[6]) for x in rows if float(x[0])>3]
w=sorted(v for v,_ in drain)
print(sys.argv[2], 'submit p99', round(r['submit']['p99_ms'],1), 'per10s', [round(x) for x in r['submit']['p99_ms_per_10s']], 'get p99', round(r['get']['p99_ms'],1), 'drain', round(r.get('drain_s') or 0,1), 'cpu/job', round(r.get('cpu_ms_per_job') or 0,2), '| gc passes after 3 s', len(w), 'max %.1f' % (w[-1] if w else 0), 'sum %.0f ms' % sum(w), 'over 20 ms', sum(1 for v in w if v > 20), 'invalid', r.get('invalid'))
PYEOF
done
