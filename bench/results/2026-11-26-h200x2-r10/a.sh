#!/bin/bash
# Device call A (r10): the GPU suite on this tree, the GPUs' processes after it (a leak check),
# the fleet check 10 times; then churn (5,000 workers draining 10,000, 45 s) prev (f05e460) and new.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
{ nproc; lscpu | grep -E "Model name|NUMA node\(s\)"; python3 --version; nvidia-smi -L; cat /proc/loadavg; date -u; } > "$OUT/machine.txt" 2>&1
if [ -z "${A_NO_GPU:-}" ]; then
  mkdir -p $OUT/s && OUT=$OUT/s SUITE_TIMEOUT=${A_SUITE_T:-300} bash scripts/gpu-check.sh suite > /dev/null 2>&1
  tail -3 $OUT/s/suite.log
  { echo "== after the suite $(date -u +%T)"; nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader
    for p in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader); do echo "pid $p: $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | cut -c1-200)"; done
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader; } > $OUT/leak.txt 2>&1
  cat $OUT/leak.txt
  mkdir -p $OUT/fc && OUT=$OUT/fc timeout 150 bash scripts/gpu-check.sh fleet-check 10 > $OUT/fc-run.txt 2>&1
  grep -iE "false|named|verdict|GB/s|runs" $OUT/fc-run.txt | head -12
  tar czf $OUT/gpu.tgz -C $OUT s fc fc-run.txt && rm -rf $OUT/s $OUT/fc
fi
mkdir -p "$OUT/cp" "$OUT/logs"
k=0
for which in ${A_RUNS:-prev new}; do
  k=$((k+1)); dir=$ROOT; [ $which = prev ] && dir=$ROOT/.dev/ab-prev; [ $which = d0 ] && dir=$ROOT/.dev/ab-d0; [ $which = head ] && dir=$ROOT/.dev/ab-head
  echo "== churn $k $which $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/cp.log"
  (cd "$dir" && PYTHONPATH=$dir:/tmp/site timeout 120 python3 bench/control_plane.py --workers 5000 --queue 10000 --churn --duration 45 \
     --coordinator-cpus 0,1 --out "$OUT/cp/churn-$k-$which" --logs "$OUT/logs/churn-$k-$which") 2>&1 | tail -2 | cut -c1-700 | tee -a "$OUT/cp.log"
  python3 -c "
import json,sys;r=json.load(open(sys.argv[1]))['runs'][0]
print('  per10s submit', [round(x) for x in r['submit']['p99_ms_per_10s']], 'get', [round(x) for x in r['get']['p99_ms_per_10s']], 'drain', r.get('drain_s'), 'done', r.get('jobs_finished'), 'cpu/job', round(r.get('cpu_ms_per_job',0),2))" "$OUT/cp/churn-$k-$which/results.json" 2>&1 | tee -a "$OUT/cp.log"
done
tar czf "$OUT/cp.tgz" -C "$OUT" cp logs && rm -rf "$OUT/cp" "$OUT/logs"
