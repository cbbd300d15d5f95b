#!/bin/bash
for k in 1 2 3 4; do
  case $k in 1|4) which=prev; dir=/tmp/r15tree;; *) which=new; dir=/work/main;; esac
  (cd $dir && PYTHONPATH=$dir timeout 600 /work/main/.venv/bin/python bench/control_plane.py --workers 2000 --queue 4000 --churn --duration 30 --out /tmp/abba16/r$k-$which --logs /tmp/abba16/l$k-$which > /tmp/abba16/r$k-$which.txt 2>&1)
  python3 -c "
import json,sys;r=json.load(open(sys.argv[1]))['runs'][0]
print(sys.argv[2], 'invalid', r.get('invalid'), 'done', r['jobs_finished'], 'drain', r.get('drain_s') and round(r['drain_s'],1), 'cpu/job', round(r['cpu_ms_per_job'],2), 'submit p50/p99', round(r['submit']['p50_ms'],1), round(r['submit']['p99_ms'],1), 'get p99', round(r['get']['p99_ms'],1), 'list p99', round(r['list_workers']['p99_ms'],1))" /tmp/abba16/r$k-$which/results.json $k-$which >> /tmp/abba16/summary.txt 2>&1
done
