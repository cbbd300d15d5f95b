#!/bin/bash
cd /work/main
for i in 1 2; do for v in def t2; do
  d=/tmp/gcab/$v-$i; mkdir -p $d
  unset GCY GCY1; [ $v = t2 ] && export GCY=20000 GCY1=2
  GC2_OUT=$d/gc.txt HOP_OUT=$d/hop.txt PYTHONPATH=/work/main:/work/main/.dev/run/probe timeout 400 .venv/bin/python bench/control_plane.py --workers 2000 --queue 8000 --churn --duration 45 --worker-relay --out $d/out --logs $d/logs > $d/run.txt 2>&1
done; done
echo done > /tmp/gcab/DONE
