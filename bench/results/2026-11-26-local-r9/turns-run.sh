#!/bin/bash
# Local: the deep queue with each loop's turn lengths recorded (this tree, d0feaca).
cd /work/main
k=0
for which in ${ORDER:-new d0}; do
  k=$((k+1)); case $which in new) dir=/work/main;; d0) dir=/work/main/.dev/ab-d0;; esac
  rm -f /tmp/turns-$which.*
  echo "== $k $which $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd $dir && TURNS_OUT=/tmp/turns-$which PYTHONPATH=$dir:/work/main/.dev/turns /work/main/.venv/bin/python bench/control_plane.py --workers 2000 --queue 4000 --duration 40 --out /work/main/.dev/turns/dq-$k-$which) 2>&1 | tail -n 1 | cut -c1-400
done
