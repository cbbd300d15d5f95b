#!/bin/bash
# Local ABBA: this tree with its edge loop (edge) and with the server on the core loop (one).
cd /work/main
k=0
for which in ${ORDER:-one edge edge one}; do
  k=$((k+1)); site=""; [ $which = one ] && site=:/work/main/.dev/oneloop
  echo "== $k $which $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=/work/main$site .venv/bin/python bench/control_plane.py ${ARGS:---workers 2000 --queue 4000 --duration 40} --out .dev/oneloop/${TAG:-dq}-$k-$which 2>&1 | tail -n 1 | cut -c1-330
done
