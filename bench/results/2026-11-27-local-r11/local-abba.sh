#!/bin/bash
# Local ABBA: the working tree (new) against .dev/ab-head (head), churn 1,000 workers draining 2,000.
cd /work/main
k=0
for which in ${ORDER:-new head head new}; do
  k=$((k+1)); dir=/work/main; [ $which = head ] && dir=/work/main/.dev/ab-head
  out=/work/main/.dev/abba/${TAG:-churn}-$k-$which
  (cd $dir && PYTHONPATH=$dir /work/main/.venv/bin/python bench/control_plane.py ${ARGS:---workers 1000 --queue 2000 --churn --duration 30} --out $out) > /dev/null 2>&1
  python3 -c "
import json,sys;r=json.load(open(sys.argv[1]))['runs'][0]
print(sys.argv[2], 'submit p50/p99 %.1f/%.1f' % (r['submit']['p50_ms'], r['submit']['p99_ms']), 'get p99 %.1f' % r['get']['p99_ms'], 'per10s', [round(x) for x in r['submit']['p99_ms_per_10s']], 'drain', r.get('drain_s') and round(r['drain_s'],2), 'cpu/job', r.get('cpu_ms_per_job') and round(r['cpu_ms_per_job'],2), 'cpu%', round(r['cpu_percent']), 'invalid', r.get('invalid'))" $out/results.json "$k $which"
done
