#!/bin/bash
# Local A/B (ABBA) of the drain's hop budget: A = ea54917, B = the working tree.
for run in A1 B1 B2 A2; do
  t=${run:0:1}; dir=/work/main; [ $t = A ] && dir=/tmp/treeA
  (cd $dir && PYTHONPATH=$dir timeout 600 /work/main/.venv/bin/python bench/control_plane.py --workers 3000 --queue 6000 --churn --duration 30 --out /tmp/ab/$run > /tmp/ab/$run.log 2>&1)
  python3 -c "
import json;r=json.load(open('/tmp/ab/$run/results.json'))['runs'][0]
w=r.get('worker_message_wait_s') or []
print('$run', 'submit p99', round(r['submit']['p99_ms'],1), 'get p99', round(r['get']['p99_ms'],1), 'per10s', [round(x) for x in r['submit']['p99_ms_per_10s']], 'wait max', max(w) if w else None, 'wait p50', sorted(w)[len(w)//2] if w else None, 'done', r['jobs_finished']['succeeded'], 'lost', r['workers_declared_lost'], 'cpu/job', round(r['cpu_ms_per_job'],2))" >> /tmp/ab/summary.txt
done
