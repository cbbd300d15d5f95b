#!/bin/bash
# Device call E (issue 27): the deep queue, this tree against d0feaca (its own bench), ABBA; then
# 10,000 workers with the stall watch at 50 ms.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
ROOT=$PWD
{ nproc; lscpu | grep -E "Model name|NUMA node\(s\)"; python3 --version; cat /proc/loadavg; date -u; } > "$OUT/machine.txt" 2>&1
mkdir -p "$OUT/cp" "$OUT/logs"
k=0
for which in new old old new; do
  k=$((k+1)); dir=$ROOT; [ $which = old ] && dir=$ROOT/.dev/ab-d0
  echo "== deep $k $which $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/cp.log"
  (cd "$dir" && PYTHONPATH=$dir:/tmp/site timeout 130 python3 bench/control_plane.py --workers 5000 --queue 10000 --duration 45 \
     --coordinator-cpus 0,1 --out "$OUT/cp/deep-$k-$which" --logs "$OUT/logs/deep-$k-$which") 2>&1 | tail -3 | tee -a "$OUT/cp.log"
done
echo "== w10k $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/cp.log"
RINGLEADER_STALL_WARN=0.05 PYTHONPATH=$ROOT:/tmp/site timeout 150 python3 bench/control_plane.py --workers 10000 --duration 60 \
  --coordinator-cpus 0,1 --out "$OUT/cp/w10k" --logs "$OUT/logs/w10k" 2>&1 | tail -3 | tee -a "$OUT/cp.log"
grep -h "event loop stalled" "$OUT"/logs/w10k/*.log | cut -c1-220 > "$OUT/stalls.log"
tar czf "$OUT/cp.tgz" -C "$OUT" cp logs && rm -rf "$OUT/cp" "$OUT/logs"
