#!/bin/bash
# Device call B (r10): the deep queue (5,000 workers, 10,000 queued, 45 s) ABBA: this tree and
# d0feaca (each with its own bench); the coordinator pinned to cores 0,1.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
ROOT=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
{ nproc; lscpu | grep -E "Model name|NUMA node\(s\)"; python3 --version; cat /proc/loadavg; date -u; } > "$OUT/machine.txt" 2>&1
mkdir -p "$OUT/cp" "$OUT/logs"
k=0
for which in ${B_RUNS:-new d0 d0 new}; do
  k=$((k+1)); dir=$ROOT; [ $which = prev ] && dir=$ROOT/.dev/ab-prev; [ $which = d0 ] && dir=$ROOT/.dev/ab-d0
  echo "== deep $k $which $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/cp.log"
  (cd "$dir" && PYTHONPATH=$dir:/tmp/site timeout 110 python3 bench/control_plane.py --workers 5000 --queue 10000 --duration 45 \
     --coordinator-cpus 0,1 --out "$OUT/cp/deep-$k-$which" --logs "$OUT/logs/deep-$k-$which") 2>&1 | tail -2 | cut -c1-600 | tee -a "$OUT/cp.log"
done
tar czf "$OUT/cp.tgz" -C "$OUT" cp logs && rm -rf "$OUT/cp" "$OUT/logs"
