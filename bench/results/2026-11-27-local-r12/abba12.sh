#!/bin/bash
# Local ABBA: the working tree (new) against .dev/ab-prev (568bca7), default store, no probes.
cd /work/main
k=0
for which in ${ORDER:-new prev prev new}; do
  k=$((k+1)); dir=/work/main; [ $which = prev ] && dir=/work/main/.dev/ab-prev
  out=/work/main/.dev/abba/${TAG:-r12}-$k-$which
  (cd $dir && PYTHONPATH=$dir /work/main/.venv/bin/python bench/control_plane.py ${ARGS:---workers 3000 --queue 6000 --churn --duration 30} --out $out) > /dev/null 2>&1
  python3 -c "
import json,sys;r=json.load(open(sys.argv[1]))['runs'][0]
print(sys.argv[2], 'submit p50/p99 %.1f/%.1f' % (r['submit']['p50_ms'], r['submit']['p99_ms']), 'get p50/p99 %.1f/%.1f' % (r['get']['p50_ms'], r['get']['p99_ms']), 'per10s', [round(x) for x in r['submit']['p99_ms_per_10s']], 'jobs', r['jobs_finished']['succeeded'], 'cpu/job', round(r['cpu_ms_per_job'],2), 'stalls', len(r.get('loop_stalls') or []))" $out/results.json "$k $which"
done
