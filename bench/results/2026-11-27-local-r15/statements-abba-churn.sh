#!/bin/bash
cd /work/main
for k in 1 2 3 4; do
  case $k in 1|4) which=base; dir=/work/main/.dev/ab-prev;; *) which=new; dir=/work/main;; esac
  (cd $dir && PYTHONPATH=$dir timeout 300 /work/main/.venv/bin/python bench/control_plane.py --workers 3000 --queue 6000 --churn --duration 30 --out /tmp/abba15/r$k-$which --logs /tmp/abba15/l$k-$which > /tmp/abba15/r$k-$which.txt 2>&1)
  python3 -c "
import json,sys;r=json.load(open(sys.argv[1]))['runs'][0]
print(sys.argv[2], 'done', r['jobs_finished'], 'drain', r.get('drain_s'), 'cpu/job', round(r['cpu_ms_per_job'],2), 'submit p50/p99', round(r['submit']['p50_ms'],1), round(r['submit']['p99_ms'],1), 'get p99', round(r['get']['p99_ms'],1), 'wait max', max(r.get('worker_message_wait_s') or [0]))" /tmp/abba15/r$k-$which/results.json $k-$which >> /tmp/abba15/summary.txt 2>&1
done
