#!/bin/bash
# Local A/B of the route change (r18): pre = a322dae checked out at /tmp/ab-pre (git worktree), post = 95b7d95 at /work/wt; relay on, 2,000 workers draining 4,000
PY=/work/main/.venv/bin/python
k=0
for which in pre post post pre; do
  k=$((k+1)); dir=/work/wt; [ $which = pre ] && dir=/tmp/ab-pre
  (cd $dir && PYTHONPATH=$dir timeout 400 $PY bench/control_plane.py --workers 2000 --queue 4000 --churn --duration 30 --worker-relay --out /tmp/r18/ab-$k-$which > /tmp/r18/ab-$k-$which.txt 2>&1)
  $PY -c "
import json,sys;r=json.load(open(sys.argv[1]))['runs'][0]
print(sys.argv[2], 'submit p99', round(r['submit']['p99_ms'],1), 'per10s', [round(x) for x in r['submit']['p99_ms_per_10s']], 'drain', round(r.get('drain_s') or 0,1), 'cpu/job', round(r.get('cpu_ms_per_job') or 0,2), 'hb us', round(r['heartbeat']['cpu_us_per_heartbeat']), 'invalid', r.get('invalid'))" /tmp/r18/ab-$k-$which/results.json $k-$which >> /tmp/r18/ab.txt 2>&1
done
