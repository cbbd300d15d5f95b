#!/bin/bash
for run in A1 B1 B2 A2; do
  t=${run:0:1}; dir=/work/main; [ $t = A ] && dir=/tmp/treeA
  (cd $dir && PYTHONPATH=$dir timeout 300 /work/main/.venv/bin/python bench/read_flood.py --workers 2000 --clients 64 --duration 20 --out /tmp/rf/$run > /tmp/rf/$run.log 2>&1)
  echo "$run $(tail -2 /tmp/rf/$run.log | tr '\n' ' ' | cut -c1-400)" >> /tmp/rf/summary.txt
done
