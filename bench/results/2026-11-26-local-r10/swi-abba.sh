#!/bin/bash
# Local ABBA: this tree with the default 5-ms switch interval (def) and 1 ms (swi, sitecustomize).
cd /work/main
k=0
for which in ${ORDER:-swi def def swi}; do
  k=$((k+1)); site=""; [ $which = swi ] && site=:/work/main/.dev/swi
  out=/work/main/.dev/abba/${TAG:-swi}-$k-$which
  PYTHONPATH=/work/main$site .venv/bin/python bench/control_plane.py ${ARGS:---workers 2000 --queue 4000 --churn --duration 30} --out $out > $out.log 2>&1
  python3 -c "
import json,sys;r=json.load(open(sys.argv[1]))['runs'][0]
print(sys.argv[2], 'submit p50/p99 %.1f/%.1f' % (r['submit']['p50_ms'], r['submit']['p99_ms']), 'get p99 %.1f' % r['get']['p99_ms'], 'per10s', [round(x) for x in r['submit']['p99_ms_per_10s']], 'drain', r.get('drain_s') and round(r['drain_s'],2), 'cpu/job', r.get('cpu_ms_per_job') and round(r['cpu_ms_per_job'],2), 'cpu%', round(r['cpu_percent']), 'stalls', len(r.get('loop_stalls') or []), 'invalid', r.get('invalid'))" $out/results.json "$k $which"
done
